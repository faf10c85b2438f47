"""Losing a node of a multi-node Ray cluster mid-study: the trial on it is recorded as
`node_lost` (not counted, not the configuration's fault) and the study completes on the
remaining node.

The scripts of tests/clusters/ run one after another on one real 2-node local Ray cluster,
started once in a process of its own (`cluster_run`): each in a folder of its own, with a
fresh worker node (the one before is lost or removed), and each test reads its own part."""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from conftest import EXAMPLES, QUICK, WORKLOADS

pytestmark = pytest.mark.ray

CLUSTERS = Path(__file__).resolve().parents[1] / "clusters"
NO_CUDA = not __import__("torch").cuda.is_available()
NODE_LOSS_TRIALS = 4  # the baseline, then two at once (one on each node: the worker's is lost), then the rest
# the scripts take about 170 s on an idle 2-core machine, over 540 s beside two busy loops and another test worker:
# the limits only catch a hang
RUN_LIMIT_S = 900
TEST_LIMIT_S = RUN_LIMIT_S + 200  # the first of these tests on a worker waits for the whole of cluster_run


def _env(home: Path) -> dict[str, str]:
    """The script's environment: not the session's Ray, and the product's own timing rule
    (not the tests' +-25%): a node is removed while a trial runs, and a trial that stops
    timing early can be over before that. Otherwise as conftest's autouse fixtures set it for
    a test (they apply to a test, after a module's fixture): no paired confirmation, one
    metric seed, an advisor home of its own, tables as on a pipe, the default storage."""
    return {k: v for k, v in os.environ.items()
            if k not in ("RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS", "ADVISOR_TIMING_TOLERANCE", "ADVISOR_STORAGE",
                         "COLUMNS", "LINES")} \
        | {k: v for k, v in QUICK.items() if k != "ADVISOR_TIMING_TOLERANCE"} \
        | {"ADVISOR_HOME": str(home), "PYTHONUNBUFFERED": "1"}  # unbuffered: the parts' output in order


class ClusterRun:
    """The output of local_cluster.py, split into its parts."""

    def __init__(self, root: Path, output: str) -> None:
        self.root, self.output = root, output

    def part(self, name: str) -> tuple[int | None, str]:
        """The part's exit status (None when it did not end) and output (all of it when it did
        not start)."""
        found = re.search(rf"^== {name}\n(.*?)(?:^== {name} exit (-?\d+)$|\Z)", self.output, re.S | re.M)
        if not found:
            return None, self.output[-6000:]
        return (int(found.group(2)) if found.group(2) else None), found.group(1)

    def storage(self, name: str) -> str:
        return f"sqlite:///{self.root / name / 'advisor.db'}"


@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory) -> ClusterRun:
    """node_loss.py, spanning.py and (where torch sees no CUDA device: the cluster's GPU is a
    stand-in) gpu_resource.py on one cluster: a cluster started once, not once a test. Once a
    run, too: where pytest-xdist hands these tests to two workers, the second waits for the
    first one's run (a lock in the folder the workers share) and reads its output."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return _run_cluster_scripts(tmp_path_factory)
    shared = tmp_path_factory.getbasetemp().parent  # this run's, above each worker's own
    with open(shared / "cluster_run.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = shared / "cluster_run.json"
        if done.exists():
            root, output = json.loads(done.read_text())
            return ClusterRun(Path(root), output)
        run = _run_cluster_scripts(tmp_path_factory)
        done.write_text(json.dumps([str(run.root), run.output]))
        return run


def _run_cluster_scripts(tmp_path_factory) -> ClusterRun:
    root = tmp_path_factory.mktemp("cluster")
    spaces = {"node_loss": "batch_size: {choices: [16, 32, 64, 128, 256, 512]}\nprecision: fp32\n",
              "spanning": "batch_size: {choices: [32, 64, 128]}\nprecision: fp32\nparallelism: ddp\ndevices: 2\n",
              "gpu_resource": "batch_size: {choices: [32, 64]}\nprecision: fp32\n"}
    for name, space in spaces.items():
        (root / name).mkdir()
        (root / name / "s.yaml").write_text(space)
    args = ["node_loss", str(root / "node_loss"), str(EXAMPLES / "digits_mlp.py"), "s.yaml", "0.3",
            str(NODE_LOSS_TRIALS),
            "--", "spanning", str(root / "spanning"), str(WORKLOADS / "announcing.py"), "s.yaml", "4", "2"]
    if NO_CUDA:
        args += ["--", "gpu_resource", str(root / "gpu_resource"), str(EXAMPLES / "digits_mlp.py"), "s.yaml"]
    proc = subprocess.Popen([sys.executable, str(CLUSTERS / "local_cluster.py"), *args], cwd=root,
                            env=_env(tmp_path_factory.mktemp("advisor-home")), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = proc.communicate(timeout=RUN_LIMIT_S)
    except subprocess.TimeoutExpired:  # a hang: stopped (it shuts its cluster down), and each part says how far it got
        proc.terminate()
        try:
            output, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
        output += f"\n(the cluster's scripts were stopped after {RUN_LIMIT_S} s)\n"
    return ClusterRun(root, output)


@pytest.mark.timeout(TEST_LIMIT_S)
def test_node_loss_mid_study(cluster_run):
    code, out = cluster_run.part("node_loss")
    assert code == 0, out[-3000:]
    assert "removing worker node" in out
    trials = optuna.load_study(study_name="digits_mlp-s", storage=cluster_run.storage("node_loss")).get_trials()
    lost = [t for t in trials if t.user_attrs.get("failure_class") == "node_lost"]
    assert len(lost) == 1, out[-3000:]
    assert "node running this trial was lost" in lost[0].user_attrs["failure_message"]
    # the study's total, reached on the remaining node (a configuration dominated beyond noise
    # by a feasible one is stored probed only, PRUNED: which ones depends on measured speeds)
    measured = [t for t in trials if t.state.name in ("COMPLETE", "PRUNED") and "duplicate_of" not in t.user_attrs]
    assert len(measured) == NODE_LOSS_TRIALS and sum(t.state.name == "COMPLETE" for t in measured) >= 1


@pytest.mark.timeout(TEST_LIMIT_S)
@pytest.mark.skipif(not NO_CUDA, reason="the cluster's GPU is a stand-in resource")
def test_the_hardware_is_read_on_the_cluster_not_on_the_driver(cluster_run):
    """With --ray-address the space and the trials' device come from a node of the cluster:
    a task asking for a GPU reads it there (Ray gives it CUDA_VISIBLE_DEVICES=0), and a
    node that offers a GPU torch cannot see is said, not silently run as if it were."""
    code, out = cluster_run.part("gpu_resource")
    assert code == 0, out[-3000:]
    assert "read on Ray node" in out and "(CUDA_VISIBLE_DEVICES=0)" in out, out[-3000:]
    assert "the Ray cluster offers GPUs, but torch on the node given one sees no CUDA device" in out


@pytest.mark.timeout(TEST_LIMIT_S)
def test_a_trial_wider_than_a_node_spans_two_and_a_lost_node_fails_it(cluster_run):
    """A 2-node local cluster, one CPU each: a DDP trial of 2 ranks cannot fit on a node, so
    its ranks are placed one on each (a Ray placement group) and it trains; the next one
    loses the worker node mid-trial and is `node_lost`; with one node left, another 2-rank
    trial is refused at once, not left waiting for a placement that cannot come."""
    code, out = cluster_run.part("spanning")
    assert code == 0, out[-3000:]
    assert "Ray cluster: 2 node(s)" in out and "up to 2 ranks (CPUs)" in out  # advisor hardware --ray-address
    trials = {t.number: t for t in optuna.load_study(study_name="spanning",
                                                     storage=cluster_run.storage("spanning")).get_trials()}
    placed = trials[1].user_attrs
    assert trials[1].state.name == "COMPLETE", placed.get("failure_message")
    nodes = [r["node"] for r in placed["telemetry"]["ranks"]]
    assert len(set(nodes)) == 2 and sorted(nodes) == sorted(placed["telemetry"]["placement"]["nodes"])
    assert placed["accuracy"] > 0.5
    assert trials[2].user_attrs["failure_class"] == "node_lost", out[-3000:]
    assert "node running this trial was lost" in trials[2].user_attrs["failure_message"]
    later = [t for n, t in trials.items() if n > 2]
    assert later and all("the Ray cluster has 1 over all its nodes" in t.user_attrs.get("failure_message", "")
                         for t in later), [t.user_attrs.get("failure_message") for t in later]
