"""A short study on a real 2-node local Ray cluster (ray.cluster_utils.Cluster, one CPU
each); once a trial has run on the worker node for DELAY_S seconds, the worker node is
removed. Run by tests/faults/test_cluster.py through local_cluster.py, or alone (a cluster
of its own):

    python tests/clusters/node_loss.py MODEL SPACE DELAY_S TRIALS

Which node runs a trial is read from the processes themselves, not guessed from the study:
a trial process is a fork of the fork server of a Ray worker the node's raylet started, so
it lies at least three levels below that raylet. (Two RUNNING trials in the study did not
mean one ran on the worker: the worker's could end before the node went, and then nothing
was lost.)"""
import sys
import threading
import time

import psutil

WORKER = {"num_cpus": 1}
TRIAL_DEPTH = 3  # raylet -> Ray worker -> fork server -> trial process


def trial_on(node) -> psutil.Process | None:
    """A trial process running on ``node`` (a ray.cluster_utils node), or None."""
    try:
        level = [psutil.Process(node.all_processes["raylet"][0].process.pid)]
        for _ in range(TRIAL_DEPTH):
            level = [child for process in level for child in process.children()]
        return next((p for p in level if p.is_running() and p.status() != psutil.STATUS_ZOMBIE), None)
    except (psutil.Error, KeyError, IndexError):
        return None


def run(cluster, worker, args: list[str]) -> int:
    model, space, delay, trials = args
    done = threading.Event()

    def remove_while_a_trial_runs_there():
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not done.is_set():
            trial = trial_on(worker)
            if trial is not None and time.time() - trial.create_time() >= float(delay):
                print(f"removing worker node (trial process {trial.pid} runs there)", flush=True)
                cluster.remove_node(worker)
                return
            time.sleep(0.05)
        print("worker node kept: no trial ran there long enough", flush=True)

    timer = threading.Thread(target=remove_while_a_trial_runs_there, daemon=True)
    timer.start()
    from advisor.cli.main import main

    try:
        return main(["tune", model, "--space", space, "--trials", trials, "--train-samples", "2000",
                     "--ray-address", cluster.address, "--sampler", "random"])
    finally:
        done.set()
        timer.join()


if __name__ == "__main__":
    from local_cluster import run_parts

    sys.exit(run_parts(["node_loss", ".", *sys.argv[1:]]))
