"""A study written by the code before the layers restructure (commit 35652ea) opens,
exports, reports and resumes with today's code. The files in tests/data were recorded
then, on this kind of 2-core CPU machine:

    advisor tune study_before_layers_model.py --space study_before_layers_space.yaml --trials 4 \\
        --train-samples 512 --storage sqlite:///study_before_layers.sqlite --study compat --no-tui
    advisor export ... --study compat --pick balanced --format json -o export_before_layers.json

(the model file is examples/digits_mlp.py as it was then; the space has no option that
depends on the hardware).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import optuna
import pytest
import torch

from advisor.cli.main import main
from advisor.core.export_format import V1_NAMES, read_export
from advisor.core.stored import read_study, read_trial
from advisor.study.storage.stores import open_storage
from advisor.tui.data import StudyData

from conftest import REPO

DATA = REPO / "tests" / "data"
MODEL = DATA / "study_before_layers_model.py"
SPACE = DATA / "study_before_layers_space.yaml"


@pytest.fixture
def old_study(workdir):
    """A copy of the recorded study file (the original stays untouched)."""
    shutil.copy(DATA / "study_before_layers.sqlite", workdir / "old.sqlite")
    return "sqlite:///old.sqlite"


def test_it_reads_back_into_records(old_study, quiet_optuna):
    study = read_study(optuna.load_study(study_name="compat", storage=old_study))
    assert [r.state for r in study.records] == ["complete"] * 4
    assert study.baseline is not None and study.baseline.number == 0
    assert study.baseline.config.batch_size == 32
    assert [r.number for r in study.front()] == [0, 2, 3]
    assert all(r.counted and r.figures for r in study.records)


def test_it_exports_what_it_exported_then(old_study, capsys):
    before = json.loads((DATA / "export_before_layers.json").read_text())
    assert main(["export", "--storage", old_study, "--study", "compat", "--pick", "balanced", "--format", "json",
                 "-o", "now.json"]) == 0
    now = json.loads(Path("now.json").read_text())
    for document in (before, now):
        document["source"].pop("exported")
    # renamed since (issue 32: the metric is any metric): the version, and the keys that
    # named it accuracy, as advisor_config 2 names them (a version-1 file reads the same)
    assert before["advisor_config"] == 1 and now["advisor_config"] == 2
    assert read_export(DATA / "export_before_layers.json")[1]["measured"]["score"] == before["measured"]["accuracy"]
    before["advisor_config"] = 2
    before["measured"] = {V1_NAMES.get(k, k): v for k, v in before["measured"].items()}
    before["measured"]["vs_baseline"] = {V1_NAMES.get(k, k): v for k, v in before["measured"]["vs_baseline"].items()}
    # added since (the GPU pass): the trials' seed, which the exported script seeds with
    assert now["source"].pop("seed") == 0
    # added since (a review): what the measured figures are of, so a hand-edited config is told apart
    assert len(now["source"].pop("config_sha256")) == 64
    # added since (a fourth review): the model's parameter count, which apply() compares; this
    # study predates recording it
    assert now["source"].pop("model_parameters") is None
    assert now["source"].pop("model_weights_dtype") is None  # (a fifth review: apply() refuses the model cast)
    # ... and the trial's run at the study's seed alone, which `advisor measure` runs again (a fifth review)
    assert now["measured"].pop("seed_score") == now["measured"]["score"]
    # added since (the figures-you-can-trust issue): the baseline's configuration, and
    # whether the ratios were confirmed in pairs (this study predates confirmation)
    assert now.pop("baseline")["batch_size"] == 32  # the baseline trial's configuration
    vs = now["measured"]["vs_baseline"]
    assert vs.pop("confirmed") is False and vs.pop("pairs") == 0
    assert vs.pop("pairs_left_out") == 0 and vs.pop("all_pairs_disturbed") is False  # (a sixth review)
    for key in ("throughput_interval", "memory_interval"):
        assert vs.pop(key) is None
    assert vs.pop("metric_noise_epsilon") == 0 and vs.pop("metric_within_noise") is False
    # added since (decisions that survive a second run): the metric's verdict; this study
    # measured no noise, so its point estimate decides and the bounds are that estimate
    assert vs.pop("metric_verdict") == "feasible" and vs.pop("metric_bounds") == [vs["metric_delta"]] * 2
    # added since (meeting users where their code is): what the metric is, and its value as
    # itself; a study from before METRIC existed reads as accuracy
    metric = now["measured"].pop("metric")
    assert metric == {"name": "accuracy", "higher_is_better": True, "fraction": True, "unit": "",
                      "value": now["measured"]["score"]}
    # added since (the GPU pass): knobs the study predates, at their defaults, which change nothing
    from advisor.core.config import TrialConfig

    defaults = TrialConfig().to_dict()
    for key in set(now["config"]) - set(before["config"]):
        assert now["config"].pop(key) == defaults[key], key
    assert now == before


def test_the_explorer_and_the_report_open_it(old_study, capsys):
    data = StudyData(open_storage(old_study), "compat")
    data.reload()
    assert [r.number for r in data.view("front")] == [0, 2, 3]
    assert data.rows[2].versus.throughput_ratio == pytest.approx(data.rows[2].throughput / data.rows[0].throughput)
    assert main(["report", "--storage", old_study, "-o", "report"]) == 0
    assert "| 3 |" in Path("report/report.md").read_text()


@pytest.mark.ray
def test_it_resumes(ray_session, old_study, capsys, quiet_optuna):
    args = ["tune", str(MODEL), "--space", str(SPACE), "--train-samples", "512", "--storage", old_study,
            "--study", "compat", "--trials", "5", "--no-tui"]
    if torch.cuda.is_available():  # its trials would run on the GPU: not comparable, refused
        assert main(args) == 2
        assert "another setup: settings: device \"cpu\" then, \"cuda\" now" in capsys.readouterr().err
        return
    before = optuna.load_study(study_name="compat", storage=old_study).trials
    assert main(args) == 0
    after = optuna.load_study(study_name="compat", storage=old_study).trials
    assert [t.values for t in after[:4]] == [t.values for t in before]  # nothing re-measured
    records = [read_trial(t) for t in after]
    assert sum(r.counted for r in records) == 5
    out = capsys.readouterr().out
    assert "resume" in out
    # its trials were timed by the rule before advisor.core.settle: said, and not a reason to refuse
    assert "timed by an older version's stopping rule" in out
    settings = optuna.load_study(study_name="compat", storage=old_study).user_attrs["settings"]
    assert "timing_tolerance" not in settings  # the study's stored settings stay as they were
