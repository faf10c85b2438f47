"""A 2-node local Ray cluster whose worker node declares one GPU (a stand-in: Ray takes a
node's declared resources on trust, and this machine has no GPU), then a one-trial study
with --ray-address: the hardware that decides the space is read by a Ray task given that
GPU slot, not on the driver. Run by tests/faults/test_cluster.py through local_cluster.py,
or alone (a cluster of its own):

    python tests/clusters/gpu_resource.py MODEL SPACE"""
import sys

WORKER = {"num_cpus": 1, "num_gpus": 1}


def run(cluster, worker, args: list[str]) -> int:
    model, space = args
    from advisor.cli.main import main

    return main(["tune", model, "--space", space, "--trials", "1", "--train-samples", "256",
                 "--ray-address", cluster.address, "--no-tui"])


if __name__ == "__main__":
    from local_cluster import run_parts

    sys.exit(run_parts(["gpu_resource", ".", *sys.argv[1:]]))
