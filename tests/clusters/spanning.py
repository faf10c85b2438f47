"""A data-parallel trial wider than any node of a real 2-node local Ray cluster
(ray.cluster_utils.Cluster, one CPU each): its two ranks are placed one on each node.
With REMOVE_AT, the worker node is removed while the REMOVE_AT-th placed trial runs. Run
by tests/faults/test_cluster.py through local_cluster.py, or alone (a cluster of its own):

    python tests/clusters/spanning.py MODEL SPACE TRIALS [REMOVE_AT]"""
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

WORKER = {"num_cpus": 1}
announced = Path()  # tests/workloads/announcing.py: a file a rank leaves there (env() makes it)


def env() -> dict[str, str]:
    """Set before the cluster starts: its nodes' workers (the trials' ranks) inherit it."""
    global announced
    announced = Path(tempfile.mkdtemp(prefix="advc-ranks-"))
    return {"ADVISOR_TEST_ANNOUNCE": str(announced)}


def cleanup() -> None:
    """After the cluster is shut down: the folder env() made (none when it did not run)."""
    if announced != Path():
        shutil.rmtree(announced, ignore_errors=True)


def run(cluster, worker, args: list[str]) -> int:
    model, space, trials, *remove_at = args
    from advisor.cli.main import main

    hardware = main(["hardware", "--ray-address", cluster.address])
    print("hardware", hardware, flush=True)
    done = threading.Event()

    def remove_while_it_runs(placed: int):
        """Once the ranks of the ``placed``-th placed trial (two ranks each) built their models,
        wait a moment and remove the worker node."""
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not done.is_set():
            if len(list(announced.iterdir())) >= 2 * placed:
                if done.wait(0.5):  # its training (6000 samples) lasts seconds past this: it is lost mid-trial
                    return  # the study ended first: the next part has this cluster
                print("removing worker node", flush=True)
                cluster.remove_node(worker)
                return
            time.sleep(0.1)

    timer = threading.Thread(target=remove_while_it_runs, args=(int(remove_at[0]),), daemon=True) \
        if remove_at else None
    if timer:
        timer.start()
    try:
        return main(["tune", model, "--space", space, "--trials", trials, "--train-samples", "6000",
                     "--ray-address", cluster.address, "--study", "spanning", "--no-confirm", "--train", "all",
                     "--sampler", "random", "--metric-seeds", "1", "--no-tui"])
    finally:
        done.set()
        if timer:
            timer.join()


if __name__ == "__main__":
    from local_cluster import run_parts

    sys.exit(run_parts(["spanning", ".", *sys.argv[1:]]))
