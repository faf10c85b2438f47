"""A data-parallel trial wider than any node of a real 2-node local Ray cluster
(ray.cluster_utils.Cluster, one CPU each): its two ranks are placed one on each node.
With REMOVE_AT, the worker node is removed while the REMOVE_AT-th placed trial runs. Run
by tests/faults/test_cluster.py in its own process (it needs its own Ray, not the test
session's).

    python tests/clusters/spanning.py MODEL SPACE TRIALS [REMOVE_AT]"""
import sys
import tempfile
import threading
import time
from pathlib import Path

from local_cluster import start_cluster

announced = Path(tempfile.mkdtemp(prefix="advc-ranks-"))  # tests/workloads/announcing.py: a file a rank
cluster, worker, state = start_cluster("advc-", env={"ADVISOR_TEST_ANNOUNCE": str(announced)})
print("cluster", cluster.address, flush=True)
from advisor.cli.main import main

hardware = main(["hardware", "--ray-address", cluster.address])
print("hardware", hardware, flush=True)


def remove_while_it_runs(placed: int):
    """Once the ranks of the ``placed``-th placed trial (two ranks each) built their models,
    wait a moment and remove the worker node."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if len(list(announced.iterdir())) >= 2 * placed:
            time.sleep(0.5)  # its training (6000 samples) lasts seconds past this: it is lost mid-trial
            print("removing worker node", flush=True)
            cluster.remove_node(worker)
            return
        time.sleep(0.1)


if len(sys.argv) > 4:
    threading.Thread(target=remove_while_it_runs, args=(int(sys.argv[4]),), daemon=True).start()
code = main(["tune", sys.argv[1], "--space", sys.argv[2], "--trials", sys.argv[3], "--train-samples", "6000",
             "--ray-address", cluster.address, "--study", "spanning", "--no-confirm", "--train", "all",
             "--sampler", "random",
             "--metric-seeds", "1", "--no-tui"])
import ray  # noqa: E402

ray.shutdown()
cluster.shutdown()
print("exit", code, flush=True)
sys.exit(code)
