"""Per-request latency of inference trials (issue 32, item 4): measured by real trials of
examples/digits_inference.py in this process (as ``run_trial`` runs them), stored through
the strategy's own ``record_result``, read back, and shown where users read a trial; the
--max-latency-ms constraint; older studies read with no latency. No timing is asserted
beyond order and positivity."""

from __future__ import annotations

import json
from dataclasses import replace

import optuna
import pytest

from advisor.core.config import TrialConfig
from advisor.core.latency import CONSTRAINT, Latency, fmt_ms, percentile
from advisor.core.objectives import DIRECTIONS, OBJECTIVES, Limits
from advisor.core.results import TrialPayload, TrialSettings
from advisor.core.stored import read_study, read_trial
from advisor.study.run._ledger import record_result
from advisor.study.storage import stores as st
from advisor.trial.entry import run_trial
from advisor.trial.latency import FLOOR_CALLS
from advisor.workload.contract import load_workload

from conftest import EXAMPLES, REPO, exit_status

MODEL = EXAMPLES / "digits_inference.py"
SETTINGS = TrialSettings(train_samples=1, workload="inference", max_timing_s=0.5)
NAME = "digits_inference-infer"


def run(batch_size, part="full"):
    payload = TrialPayload.of(load_workload(MODEL), TrialConfig(batch_size=batch_size), replace(SETTINGS, part=part))
    result = run_trial(payload)
    assert result.ok, result.failure_message
    return result


@pytest.fixture(scope="module")
def measured():
    """Two real inference trials: the baseline (batch 64) and batch 32."""
    return [run(64), run(32)]


def _store(url, results, limits=Limits(0.01), max_latency_ms=None):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(storage=st.open_storage(url), study_name=NAME, directions=list(DIRECTIONS))
    for key, value in {"workload_path": str(MODEL), "workload": "inference", "space_name": "infer",
                       "settings": SETTINGS.to_dict(), "max_accuracy_drop": 0.01, "memory_cap_bytes": None,
                       "max_latency_ms": max_latency_ms, "objectives": list(OBJECTIVES)}.items():
        study.set_user_attr(key, value)
    frozen = []
    for number, result in enumerate(results):
        trial = study.ask()
        trial.set_user_attr("config", TrialConfig(batch_size=[64, 32][number]).to_dict())
        if number == 0:
            trial.set_user_attr("baseline", True)
        frozen.append(record_result(study, trial, result, 5.0, limits, results[0].score))
    return frozen


def test_percentiles_and_their_text():
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 50) == 3.0
    assert percentile([1.0, 2.0], 99) == pytest.approx(1.99)
    lat = Latency.measured(8, [0.003, 0.001, 0.002, 0.010], [0.0005, 0.0007])
    assert lat.p50_ms <= lat.p95_ms <= lat.p99_ms <= 10.0 and lat.calls == 4
    assert lat.batch1_ms == pytest.approx(0.6) and lat.batch1_calls == 2 and lat.batch1_note is None
    assert Latency.from_dict(lat.to_dict()) == lat
    assert Latency.from_dict(None) is None and Latency.of({"telemetry": {"threads": 2}}) is None
    assert [fmt_ms(v) for v in (0.1234, 3.1, 42.12, 1234.0, None)] == ["0.123 ms", "3.10 ms", "42.1 ms",
                                                                        "1,234 ms", "-"]


def test_an_inference_trial_measures_its_latency_at_its_batch_size_and_at_batch_1(measured):
    for result, bs in zip(measured, (64, 32), strict=True):
        lat = Latency.from_dict(result.telemetry["latency"])
        assert lat is not None and lat.batch_size == bs and lat.calls >= FLOOR_CALLS
        assert 0 < lat.p50_ms <= lat.p95_ms <= lat.p99_ms
        assert lat.batch1_ms is not None and 0 < lat.batch1_ms <= lat.batch1_p99_ms
        assert lat.batch1_calls >= FLOOR_CALLS and lat.windows >= 1  # its calls judged for interference
        assert {"timing", "latency", "eval"} <= set(result.phase_s)
        assert result.throughput > 0  # measured as before, beside it


def test_a_remeasurement_probe_times_no_latency():
    assert "latency" not in run(64, part="probe").telemetry


def test_the_figures_read_back_from_storage_and_show_where_users_read_a_trial(measured, tmp_path):
    from advisor.outputs.console import front_table, trial_text
    from advisor.outputs.export import export_document
    from advisor.outputs.listing import trial_lines, trials_table
    from advisor.outputs.summary import front_rows
    from advisor.tui.data import StudyData
    from advisor.tui.widgets.detail import describe

    url = f"sqlite:///{tmp_path / 's.db'}"
    frozen = _store(url, measured)
    record = read_trial(frozen[1])
    lat = record.latency
    assert lat == Latency.from_dict(measured[1].telemetry["latency"]) and record.feasible
    line = trial_text(measured[1], record, None)
    assert f"p50 {fmt_ms(lat.p50_ms)} p99 {fmt_ms(lat.p99_ms)} at batch 32, batch 1 {fmt_ms(lat.batch1_ms)}" in line

    study = read_study(st.load(st.open_storage(url), NAME))
    from rich.console import Console

    console = Console(width=250, record=True)
    console.print(front_table(study))
    console.print(trials_table(study, trial_lines(study)))
    printed = console.export_text()
    assert "p50 / p99 latency" in printed and f"{fmt_ms(lat.p50_ms)} / {fmt_ms(lat.p99_ms)}" in printed
    assert all(row.to_dict()["latency"]["p99_ms"] > 0 for row in front_rows(study))
    assert trial_lines(study)[1].to_dict()["latency"] == lat.to_dict()

    exported = export_document(study, record)["measured"]["latency"]
    assert exported["p99_ms"] == lat.p99_ms and "batch 1" in exported["summary"]

    data = StudyData(st.open_storage(url), NAME)
    data.reload()
    row = next(r for r in data.rows if r.number == 1)
    assert f"latency p50 {fmt_ms(lat.p50_ms)}" in describe(row, data.attrs).plain
    assert f"({lat.calls} calls at batch 32); batch 1 {fmt_ms(lat.batch1_ms)}" in describe(row, data.attrs).plain


def test_the_report_plots_latency_for_an_inference_study(measured, tmp_path):
    from advisor.outputs.report import write_report

    url = f"sqlite:///{tmp_path / 's.db'}"
    _store(url, measured)
    path = write_report(read_study(st.load(st.open_storage(url), NAME)), tmp_path / "report")
    text = path.read_text()
    assert "](latency.png)" in text and (tmp_path / "report" / "latency.png").stat().st_size > 0
    assert "p50 / p95 / p99 latency | batch 1 |" in text


def test_a_trial_over_the_latency_limit_is_infeasible_and_says_why(measured, tmp_path):
    from advisor.outputs.console import trial_text

    url = f"sqlite:///{tmp_path / 's.db'}"
    limits = Limits(0.01, max_latency_ms=0.001)  # no forward pass answers in a microsecond
    frozen = _store(url, measured, limits, max_latency_ms=0.001)
    record = read_trial(frozen[1])
    assert not record.feasible and record.constraints[CONSTRAINT] > 0
    p99 = record.latency.p99_ms
    assert f"infeasible: p99 latency {fmt_ms(p99)} over --max-latency-ms 0.001" in trial_text(measured[1], record, None)
    study = read_study(st.load(st.open_storage(url), NAME))
    assert study.limits.max_latency_ms == 0.001 and study.front() == []
    loose = Limits(0.01, max_latency_ms=1e9)
    assert loose.feasible(record.figures, measured[0].score, p99)
    assert CONSTRAINT not in Limits(0.01).constraints(record.figures, measured[0].score, p99)  # no limit, none


def test_max_latency_ms_is_for_inference_studies_only(workdir, capsys):
    assert exit_status(["tune", str(EXAMPLES / "digits_mlp.py"), "--max-latency-ms", "10"]) == 2
    assert "--max-latency-ms applies to inference studies only" in capsys.readouterr().err
    assert exit_status(["tune", str(MODEL), "--workload", "inference", "--max-latency-ms", "0"]) == 2
    assert "--max-latency-ms must be a positive number of milliseconds" in capsys.readouterr().err
    # --train all means nothing to an inference study (it was accepted without a word)
    assert exit_status(["tune", str(MODEL), "--workload", "inference", "--train", "all"]) == 2
    assert "--train all applies to training studies: an inference study trains nothing" in capsys.readouterr().err
    # nor --train-samples (accepted, and a resume with it was refused over an internal "train_samples 1")
    assert exit_status(["tune", str(MODEL), "--workload", "inference", "--train-samples", "64"]) == 2
    assert ("--train-samples applies to training studies: an inference study trains nothing"
            in capsys.readouterr().err)
    import advisor

    with pytest.raises(advisor.StudyError, match="^train_samples= applies to training studies"):
        advisor.tune(str(MODEL), workload="inference", train_samples=64)
    assert not (workdir / "advisor.db").exists()


def test_an_old_study_reads_with_no_latency(workdir, capsys, quiet_optuna):
    import shutil

    shutil.copy(REPO / "tests" / "data" / "study_before_layers.sqlite", workdir / "old.sqlite")
    study = read_study(optuna.load_study(study_name="compat", storage="sqlite:///old.sqlite"))
    assert study.records and all(r.latency is None for r in study.records)
    assert study.limits.max_latency_ms is None
    assert exit_status(["trials", "compat", "--storage", "sqlite:///old.sqlite", "--json"]) == 0
    trials = json.loads(capsys.readouterr().out)["trials"]
    assert trials and all(t["latency"] is None for t in trials)
