"""A study on a lower-is-better metric (MSE), end to end on real Ray and SQLite: the study
stores what the metric is, every line and table names it and shows it as itself (never
"accuracy" or "pt"), a percentage limit is of the baseline's metric, and Optuna tools get
the objectives' names."""

from __future__ import annotations

import json

import optuna
import pytest
from dashboard_api import get

from advisor.cli.main import main
from advisor.core.stored import read_study
from advisor.outputs.export import export_document, trial_by_number
from advisor.study.storage.stores import open_storage

from conftest import WORKLOADS

pytestmark = pytest.mark.ray


def test_a_lower_is_better_metric_end_to_end(ray_session, workdir, capsys):
    space = workdir / "bs.yaml"
    space.write_text("batch_size: {choices: [32, 64, 128]}\n")
    code = main(["tune", str(WORKLOADS / "regression.py"), "--space", str(space), "--trials", "3",
                 "--train-samples", "2048", "--max-metric-drop", "50%", "--train", "all", "--no-tui"])
    out = capsys.readouterr().out
    assert code == 0, out
    study = optuna.load_study(study_name="regression-bs", storage=f"sqlite:///{workdir / 'advisor.db'}")
    assert study.metric_names == ["throughput", "peak_memory_bytes", "-mse (negated: higher is better)"]
    assert study.user_attrs["metric"] == {"name": "mse", "higher_is_better": False, "fraction": False, "unit": ""}
    assert study.user_attrs["max_drop_relative"] is True
    stored = read_study(study)
    base = stored.baseline
    assert base is not None and base.figures.score < 0  # the score: -mse
    mse = -base.figures.score
    assert f"mse {mse:.4g}" in out  # the trial line and the table show the MSE itself
    assert " pt" not in out and "accuracy 0." not in out and "-mse" not in out
    # the table as printed on a pipe (80 columns) wraps its header cells and caption as the
    # figures' widths fall: its caption is read with the wrapping undone, its header at full width
    assert "mse: lower is better" in " ".join(out.split())
    from rich.console import Console

    from advisor.outputs.console import front_table
    wide = Console(width=300, record=True)
    wide.print(front_table(read_study(optuna.load_study(study_name="regression-bs",
                                                        storage=f"sqlite:///{workdir / 'advisor.db'}"))))
    assert "Δ mse" in wide.export_text()
    for record in stored.records:  # feasible: at most 50% above the baseline's MSE
        if record.figures is not None and record.state == "complete":
            assert record.feasible == (-record.figures.score <= 1.5 * mse + 1e-12)
    dashboard = pytest.importorskip("optuna_dashboard._app")  # what optuna-dashboard's web API reports
    storage = open_storage(f"sqlite:///{workdir / 'advisor.db'}")
    status, body = get(dashboard.create_app(storage), f"/api/studies/{storage.get_study_id_from_name('regression-bs')}")
    assert status.startswith("200") and json.loads(body)["objective_names"][2] == "-mse (negated: higher is better)"
    document = export_document(stored, trial_by_number(stored, 0))
    assert document["measured"]["metric"]["value"] == pytest.approx(mse)
    assert document["measured"]["metric"]["name"] == "mse"



def test_a_two_stage_regression_study_never_says_accuracy(ray_session, workdir, capsys):
    """Two-stage evaluation (the default) on the MSE workload: its notes, trial lines and
    summary name the metric ("mse") or say "metric" and "training run", never "accuracy"
    (the issue: 'accuracy reused from trial 0', '3 accuracy runs', 'the accuracy gate')."""
    space = workdir / "bs.yaml"
    space.write_text("batch_size: {choices: [32, 64]}\nthreads: {choices: [null, 1]}\n")
    code = main(["tune", str(WORKLOADS / "regression.py"), "--space", str(space), "--trials", "4",
                 "--train-samples", "1024", "--max-metric-drop", "50%", "--no-confirm", "--no-tui"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "two-stage: 4 probes" in out and "training runs" in out and "metric gate" in out
    assert "accuracy" not in out.lower(), [line for line in out.splitlines() if "accuracy" in line.lower()]
