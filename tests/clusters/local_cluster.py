"""A real 2-node local Ray cluster (ray.cluster_utils.Cluster) for the scripts beside this
file, each run in a process of its own by tests/faults/test_cluster.py: its state and auth
token in a fresh temp dir, a head node of one CPU and a worker node."""
import os
import secrets
import tempfile
from pathlib import Path


def start_cluster(prefix: str, env: dict[str, str] | None = None, **worker: int):
    """Set the environment (``env`` too: before the cluster starts, so that its workers inherit
    it), start the head and one worker node (``worker``: its resources), wait for both; the
    cluster, its worker node and the state directory."""
    state = Path(tempfile.mkdtemp(prefix=prefix))
    token = state / "token"
    token.write_text(secrets.token_hex(32))
    os.chmod(token, 0o600)
    os.environ.update(env or {}, RAY_AUTH_TOKEN_PATH=str(token), RAY_TMPDIR=str(state))
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    node = cluster.add_node(**({"num_cpus": 1} | worker))
    cluster.wait_for_nodes()
    return cluster, node, state
