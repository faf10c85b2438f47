"""--log-to wandb in W&B's offline mode ($WANDB_MODE=offline, $WANDB_DIR a temp dir): the
runs W&B writes are read back from their .wandb files (``wandb_records``). The study's
events are replayed from a real stored study (``tracker_events``): a run per trial in the
study's group with its knobs as config, its figures, its failure (and a failed exit); the
study's run with its settings, the baseline, the confirmation pairs and the front."""

from __future__ import annotations

import statistics

import pytest

from advisor.core.errors import StudyError
from advisor.outputs.trackers import open_trackers

from conftest import skip_without
from recorded_study import NAME
from tracker_events import CONFIRMED, RATIOS, plan, recorded, run
from wandb_records import offline_runs, wandb_offline  # noqa: F401  (fixture)

skip_without("wandb")


def test_each_trial_is_a_run_in_the_study_group(tmp_path, wandb_offline):  # noqa: F811  (the fixture)
    _, notes = run(tmp_path, ("wandb",))
    runs = offline_runs(wandb_offline)
    [study] = [r for r in runs if r.job_type == "study"]
    trials = {int(r.summary["advisor.trial"]): r for r in runs if r.job_type == "trial"}
    assert sorted(trials) == list(range(11)) and len(runs) == 12
    assert {r.group for r in runs} == {NAME} and {r.project for r in runs} == {"advisor"}

    base = trials[0]
    assert base.name == "trial 0 (baseline): bs=64 fp32" and base.tags == ["complete", "baseline"]
    assert base.config["batch_size"] == 64 and base.config["precision"] == "fp32" and base.config["threads"] is None
    assert base.summary["throughput"] == 6736.0 and base.summary["accuracy"] == 0.9667
    assert base.history[0]["peak_memory_bytes"] > 0 and base.exit_code == 0

    assert trials[1].summary["throughput_ratio"] == pytest.approx(10240 / 6736)
    oom = trials[8]
    assert oom.tags == ["failed", "oom"] and oom.exit_code == 1 and "throughput" not in oom.summary
    assert oom.summary["failure_message"] == "CUDA out of memory. Tried to allocate 2.00 GiB"

    assert study.name == NAME and study.config["study"]["space"] == "default" and study.config["hardware"]["cpu_model"]
    assert study.summary["baseline/throughput"] == 6736.0 and study.summary["trials/run"] == 11
    pairs = [h for h in study.history if f"confirmation/trial_{CONFIRMED}/pairs" in h]
    assert [h[f"confirmation/trial_{CONFIRMED}/pairs"] for h in pairs] == [1, 2, 3]
    assert pairs[-1][f"confirmation/trial_{CONFIRMED}/throughput_ratio"] == pytest.approx(statistics.median(RATIOS),
                                                                                         rel=0.01)
    assert study.summary[f"confirmation/trial_{CONFIRMED}/confirmation"] == "confirmed"
    front = {row["trial"]: row for row in study.summary["front"]}
    assert CONFIRMED in front and 5 not in front and study.summary["front_size"] == len(front)
    assert front[CONFIRMED]["confirmed"] is True and front[CONFIRMED]["pairs"] == 3
    assert study.summary["status"] == "finished" and study.exit_code == 0
    assert notes[0].text.endswith(f"W&B project 'advisor', group '{NAME}' (offline, in {wandb_offline}/: wandb sync "
                                  "uploads it)")


def test_the_project_and_entity_given_after_the_name(tmp_path, wandb_offline):  # noqa: F811  (the fixture)
    run(tmp_path, ("wandb:my-team/tuning",))
    runs = offline_runs(wandb_offline)
    assert {r.project for r in runs} == {"tuning"} and len(runs) == 12


def test_online_without_a_login_is_refused_before_the_study(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc, no W&B settings
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    url, _ = recorded(tmp_path)
    with pytest.raises(StudyError, match=r"^--log-to wandb: not logged in to Weights & Biases: run `wandb login`"):
        open_trackers(plan(url, ("wandb",)))
