"""A 2-node local Ray cluster whose worker node declares one GPU (a stand-in: Ray takes a
node's declared resources on trust, and this machine has no GPU), then a one-trial study
with --ray-address: the hardware that decides the space is read by a Ray task given that
GPU slot, not on the driver. Run by tests/faults/test_cluster.py in its own process.

    python tests/clusters/gpu_resource.py MODEL SPACE"""
import sys

from local_cluster import start_cluster

cluster, _, state = start_cluster("advg-", num_gpus=1)
from advisor.cli.main import main

code = main(["tune", sys.argv[1], "--space", sys.argv[2], "--trials", "1", "--train-samples", "256",
             "--ray-address", cluster.address, "--no-tui"])
import ray  # noqa: E402

ray.shutdown()
cluster.shutdown()
print("exit", code, flush=True)
sys.exit(code)
