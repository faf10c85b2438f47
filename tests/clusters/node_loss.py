"""A short study on a real 2-node local Ray cluster (ray.cluster_utils.Cluster, one CPU
each); once both nodes run a trial, the worker node is removed. Run by
tests/faults/test_cluster.py through local_cluster.py, or alone (a cluster of its own):

    python tests/clusters/node_loss.py MODEL SPACE DELAY_S TRIALS"""
import sys
import threading
import time

WORKER = {"num_cpus": 1}


def run(cluster, worker, args: list[str]) -> int:
    model, space, delay, trials = args
    done = threading.Event()

    def remove_when_both_nodes_busy():
        import optuna
        optuna.logging.set_verbosity(optuna.logging.ERROR)
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not done.is_set():
            try:
                trials = optuna.load_study(study_name="digits_mlp-s", storage="sqlite:///advisor.db").get_trials()
                if sum(t.state.name == "RUNNING" for t in trials) >= 2:
                    if done.wait(float(delay)):
                        return  # the study ended first: the next part has this cluster
                    print("removing worker node", flush=True)
                    cluster.remove_node(worker)
                    return
            except Exception:  # the study is not created yet
                pass
            time.sleep(0.2)

    timer = threading.Thread(target=remove_when_both_nodes_busy, daemon=True)
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
