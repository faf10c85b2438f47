"""The study's own attributes are written and read through one module
(advisor/core/study_attrs.py), on a real Optuna study in memory."""

from __future__ import annotations

import ast

import optuna

from advisor.core.noise import MetricNoise
from advisor.core.pairs import Confirmation, Pair
from advisor.core.stored import read_study
from advisor.core.study_attrs import StudyAttrs, is_advisor_study

from conftest import REPO

# besides study_attrs itself: the read-once snapshot of a whole study (read_study) and the
# two readers of a storage's study summaries (which study is advisor's; a resumed study's budget)
SNAPSHOT_READERS = {"advisor/core/stored.py", "advisor/study/storage/stores.py", "advisor/study/run/_run_context.py"}


def test_what_is_written_reads_back_typed_and_as_the_stored_study_reads_it():
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(directions=["maximize", "minimize", "maximize"])
    attrs = StudyAttrs(study)
    assert attrs.metric_noise() is None and not attrs.has_metric_noise() and attrs.baseline_measurements() == []
    assert not attrs.baseline_disturbed() and not attrs.combined() and attrs.metric_noise_curves() == []
    attrs.write_identity({"workload_path": "/m.py", "metric": {"name": "mse", "higher_is_better": False}})
    assert is_advisor_study(attrs.all(), len(study.directions)) and not is_advisor_study(attrs.all(), 1)
    assert attrs.metric().name == "mse" and not attrs.metric().higher_is_better
    attrs.set_metric_noise(MetricNoise([0, 1, 2], [0.9, 0.92, 0.91]), curves=[[{"samples": 64, "loss": 1.0}]])
    assert attrs.has_metric_noise() and attrs.metric_noise().values == [0.9, 0.92, 0.91]
    assert attrs.metric_noise_curves() == [[{"samples": 64, "loss": 1.0}]]
    first = attrs.add_baseline_measurement({"at": 1.0, "throughput": 100.0})
    study.set_user_attr("baseline_measurements", first + [{"at": 2.0, "throughput": 90.0}])  # another driver's
    assert [m["at"] for m in attrs.add_baseline_measurement({"at": 3.0, "throughput": 95.0})] == [1.0, 2.0, 3.0]
    attrs.set_baseline_disturbed("the sentinel read 3x the median")
    attrs.set_confirmation(Confirmation(4, [Pair(0.5, 100.0, 150.0, 10.0, 9.0)], "running"))
    attrs.set_metric_seeds(4, [0, 1], [0.91, 0.90])
    attrs.mark_combined()
    attrs.set_heartbeat("host:1:ab", {"at": 5.0})
    attrs.set_claim("confirm", "host:1:ab")
    assert attrs.baseline_disturbed() and attrs.combined() and attrs.claimed_by("confirm") == "host:1:ab"
    assert attrs.heartbeats() == {"host:1:ab": {"at": 5.0}}
    attrs.set_claim("confirm", None)
    assert attrs.claimed_by("confirm") is None
    stored = read_study(study)  # the read-once view sees the same
    assert stored.metric.name == "mse" and stored.metric_noise.values == [0.9, 0.92, 0.91]
    assert list(stored.confirmations) == [4] and stored.confirmations[4].pairs[0].config_throughput == 150.0


def test_no_other_module_reads_or_writes_a_study_attribute():
    """``<study>.set_user_attr(...)`` and ``<study>.user_attrs`` (a receiver named like a
    study or a study summary) appear only in study_attrs and the snapshot readers."""
    found = []
    for path in sorted((REPO / "advisor").rglob("*.py")):
        shown = str(path.relative_to(REPO))
        if shown == "advisor/core/study_attrs.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("set_user_attr", "user_attrs"):
                receiver = ast.unparse(node.value)
                if receiver.split(".")[-1] in ("study", "summary") and (
                        node.attr == "set_user_attr" or shown not in SNAPSHOT_READERS):
                    found.append(f"{shown}:{node.lineno}: {receiver}.{node.attr}")
    assert found == []
