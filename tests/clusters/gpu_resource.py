"""A 2-node local Ray cluster whose worker node declares one GPU (a stand-in: Ray takes a
node's declared resources on trust, and this machine has no GPU), then a one-trial study
with --ray-address: the hardware that decides the space is read by a Ray task given that
GPU slot, not on the driver. Run by tests/faults/test_cluster.py in its own process.

    python tests/clusters/gpu_resource.py MODEL SPACE"""
import os
import secrets
import sys
import tempfile
from pathlib import Path

state = Path(tempfile.mkdtemp(prefix="advg-"))
token = state / "token"; token.write_text(secrets.token_hex(32)); os.chmod(token, 0o600)
os.environ["RAY_AUTH_TOKEN_PATH"] = str(token)
os.environ["RAY_TMPDIR"] = str(state)
from ray.cluster_utils import Cluster

cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
cluster.add_node(num_cpus=1, num_gpus=1)
cluster.wait_for_nodes()
from advisor.cli.main import main

code = main(["tune", sys.argv[1], "--space", sys.argv[2], "--trials", "1", "--train-samples", "256",
             "--ray-address", cluster.address, "--no-tui"])
import ray  # noqa: E402

ray.shutdown()
cluster.shutdown()
print("exit", code, flush=True)
sys.exit(code)
