"""A real 2-node local Ray cluster (ray.cluster_utils.Cluster) for the scripts beside this
file: its state and auth token in a fresh temp dir, a head node of one CPU and a worker node.

Run as a script, it runs scripts beside it one after another on one cluster (started once:
a cluster start costs seconds), each in a folder of its own and with a worker node of its
own (the one before, if still there, is removed). tests/faults/test_cluster.py runs it in a
process of its own (it needs its own Ray, not the test session's):

    python tests/clusters/local_cluster.py SCRIPT FOLDER ARGS... [-- SCRIPT FOLDER ARGS...]...

A script (node_loss.py, spanning.py, gpu_resource.py) defines WORKER (its worker node's
resources), run(cluster, worker, args) -> exit status and, optionally, env() (variables set
before the cluster starts, so that its nodes' workers inherit them) and cleanup() (called once
the cluster is shut down; the cluster's own temp folder is removed then too). Each part's output lies
between the lines `== SCRIPT` and `== SCRIPT exit STATUS`; the process exits with the first
non-zero status."""
import importlib
import os
import secrets
import shutil
import signal
import sys
import tempfile
import traceback
from pathlib import Path


def start_cluster(prefix: str, env: dict[str, str] | None = None, **worker: int):
    """Set the environment (``env`` too: before the cluster starts, so that its workers inherit
    it), start the head and one worker node (``worker``: its resources), wait for both; the
    cluster, its worker node and the state directory."""
    state = Path(tempfile.mkdtemp(prefix=prefix))
    token = state / "token"
    token.write_text(secrets.token_hex(32))
    os.chmod(token, 0o600)
    # TMPDIR: the nodes' processes (the trials' fork servers) leave their temp files with its state
    os.environ.update(env or {}, RAY_AUTH_TOKEN_PATH=str(token), RAY_TMPDIR=str(state), TMPDIR=str(state))
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    node = cluster.add_node(**({"num_cpus": 1} | worker))
    cluster.wait_for_nodes()
    return cluster, node, state


def replace_worker(cluster, worker, **resources: int):
    """Remove ``worker`` (unless a part already did) and add a fresh worker node with
    ``resources``; once the cluster counts exactly its head and that node alive, the node."""
    if worker in cluster.worker_nodes:
        cluster.remove_node(worker)
    node = cluster.add_node(**({"num_cpus": 1} | resources))
    cluster.wait_for_nodes()
    return node


def run_parts(argv: list[str]) -> int:
    """ARGV: SCRIPT FOLDER ARGS... groups separated by "--", run in that order on one cluster."""
    parts, group = [], []
    for arg in [*argv, "--"]:
        if arg != "--":
            group.append(arg)
        elif group:
            parts.append(group)
            group = []
    modules = [importlib.import_module(name) for name, *_ in parts]
    env: dict[str, str] = {}
    for module in modules:
        env |= module.env() if hasattr(module, "env") else {}
    cluster, worker, state = start_cluster("advc-", env, **modules[0].WORKER)
    print("cluster", cluster.address, flush=True)
    status = 0
    try:
        for i, (module, (name, folder, *args)) in enumerate(zip(modules, parts)):
            print(f"== {name}", flush=True)
            try:
                if i:
                    worker = replace_worker(cluster, worker, **module.WORKER)
                os.chdir(folder)
                code = module.run(cluster, worker, args)
            except SystemExit as exc:  # argparse's
                code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
            except Exception:
                traceback.print_exc()
                code = 1
            print(f"== {name} exit {code}", flush=True)
            status = status or code
    finally:  # also when the test stops it (SIGTERM: _stopped) at its time limit
        import ray

        ray.shutdown()
        cluster.shutdown()
        for module in modules:  # what a script made for its run (spanning.py's folder of announcements)
            if hasattr(module, "cleanup"):
                module.cleanup()
        shutil.rmtree(state, ignore_errors=True)  # the cluster's logs and sockets
    return status


def _stopped(signum, frame):
    raise KeyboardInterrupt(f"stopped by {signal.Signals(signum).name}")

if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _stopped)
    sys.exit(run_parts(sys.argv[1:]))
