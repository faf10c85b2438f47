"""A short study on a real 2-node local Ray cluster (ray.cluster_utils.Cluster, one CPU
each); once both nodes run a trial, the worker node is removed. Run by
tests/test_cluster.py in its own process (it needs its own Ray, not the test session's).

    python tests/clusters/node_loss.py MODEL SPACE DELAY_S TRIALS"""
import sys
import threading
import time

from local_cluster import start_cluster

cluster, worker, state = start_cluster("advc-")
print("cluster", cluster.address, flush=True)
from advisor.cli.main import main


def remove_when_both_nodes_busy():
    import optuna
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        try:
            trials = optuna.load_study(study_name="digits_mlp-s", storage="sqlite:///advisor.db").get_trials()
            if sum(t.state.name == "RUNNING" for t in trials) >= 2:
                time.sleep(float(sys.argv[3]))
                print("removing worker node", flush=True)
                cluster.remove_node(worker)
                return
        except Exception:  # the study is not created yet
            pass
        time.sleep(0.2)
timer = threading.Thread(target=remove_when_both_nodes_busy, daemon=True)
timer.start()
code = main(["tune", sys.argv[1], "--space", sys.argv[2], "--trials", sys.argv[4], "--train-samples", "2000",
             "--ray-address", cluster.address, "--sampler", "random"])
import ray  # noqa: E402

ray.shutdown()
cluster.shutdown()
print("exit", code, flush=True)
sys.exit(code)
