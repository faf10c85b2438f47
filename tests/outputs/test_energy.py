"""Energy per sample (a GPU's NVML energy counter over the timed steps) where users read a
trial: its console line, the explorer's detail pane and the export. No GPU here: the
trial below is stored through the strategy's own ``record_result`` with a made-up energy
figure (named as such); tests/runner/test_ray_gpu.py measures a real one on a GPU."""

from __future__ import annotations

import optuna

from advisor.core.config import TrialConfig
from advisor.core.objectives import Limits
from advisor.core.results import TrialResult
from advisor.core.stored import read_study, read_trial
from advisor.core.units import fmt_energy
from advisor.study.run._ledger import record_result
from advisor.study.storage import stores as st

from recorded_study import NAME, write_recorded_study


def _with_energy(url: str) -> optuna.trial.FrozenTrial:
    study = write_recorded_study(url)
    trial = study.ask()
    config = TrialConfig(precision="bf16", batch_size=128)
    trial.set_user_attr("config", config.to_dict())
    trial.set_user_attr("config_key", config.key())
    result = TrialResult(ok=True, throughput=12000.0, peak_memory_bytes=90 * 2**20, score=0.9650,
                         step_time_median_s=128 / 12000.0, energy_per_sample_j=0.0123,
                         telemetry={"energy": {"joules": 61.5, "seconds": 1.0, "power_w": 615.0}})
    return record_result(study, trial, result, 5.0, Limits(0.01), 0.9667)


def test_energy_is_formatted_in_its_unit():
    assert fmt_energy(0.0123) == "12.3 mJ/sample" and fmt_energy(2.5) == "2.5 J/sample"
    assert fmt_energy(None) == "-"


def test_a_trial_with_energy_shows_it_in_its_line_the_explorer_and_the_export(tmp_path):
    from advisor.outputs.console import trial_text
    from advisor.outputs.export import export_document
    from advisor.tui.data import StudyData
    from advisor.tui.widgets.detail import describe

    url = f"sqlite:///{tmp_path / 's.db'}"
    frozen = _with_energy(url)
    record = read_trial(frozen)
    result = TrialResult(ok=True, throughput=12000.0, peak_memory_bytes=90 * 2**20, score=0.9650,
                         energy_per_sample_j=record.get("energy_per_sample_j"))
    assert "90.0 MiB, 12.3 mJ/sample, accuracy" in trial_text(result, record, None)
    without = TrialResult(ok=True, throughput=12000.0, peak_memory_bytes=90 * 2**20, score=0.9650)
    assert "J/sample" not in trial_text(without, record, None)  # a CPU trial: no energy figure

    data = StudyData(st.open_storage(url), NAME)
    data.reload()
    row = next(r for r in data.rows if r.number == frozen.number)
    text = describe(row, data.attrs).plain
    assert "energy 12.3 mJ/sample (the GPU drew 615 W over the timed steps)" in text
    baseline_row = next(r for r in data.rows if r.number == 0)
    assert "energy" not in describe(baseline_row, data.attrs).plain

    study = read_study(st.load(st.open_storage(url), NAME))
    assert export_document(study, record)["measured"]["energy_per_sample_j"] == 0.0123
    assert "energy_per_sample_j" not in export_document(study, study.baseline)["measured"]


def test_the_report_plots_energy_when_the_trials_measured_it(tmp_path):
    """A study whose baseline and trials read a GPU's energy counter (made-up figures, as
    above) gets energy.png, referenced from report.md; the recorded CPU study gets none."""
    from advisor.core.objectives import DIRECTIONS
    from advisor.outputs.report import write_report

    url = f"sqlite:///{tmp_path / 'gpu.db'}"
    study = optuna.create_study(storage=st.open_storage(url), study_name="gpu", directions=list(DIRECTIONS))
    for key, value in {"workload_path": "model.py", "workload": "train", "space_name": "gpu",
                       "max_accuracy_drop": 0.01, "settings": {"train_samples": 10, "device": "cuda"}}.items():
        study.set_user_attr(key, value)
    for number, (precision, throughput, joules) in enumerate((("fp32", 1000.0, 0.40), ("bf16", 2600.0, 0.15),
                                                              ("tf32", 1900.0, 0.22))):
        trial = study.ask()
        config = TrialConfig(precision=precision)
        trial.set_user_attr("config", config.to_dict())
        trial.set_user_attr("config_key", config.key())
        if number == 0:
            trial.set_user_attr("baseline", True)
        result = TrialResult(ok=True, throughput=throughput, peak_memory_bytes=2**30, score=0.9,
                             step_time_median_s=0.01, energy_per_sample_j=joules)
        record_result(study, trial, result, 1.0, Limits(0.01), None if number == 0 else 0.9)
    out = tmp_path / "report"
    write_report(read_study(study), out)
    assert (out / "energy.png").read_bytes().startswith(b"\x89PNG")
    assert "(energy.png)" in (out / "report.md").read_text()

    cpu_url = f"sqlite:///{tmp_path / 'cpu.db'}"
    write_recorded_study(cpu_url)
    cpu_out = tmp_path / "cpu-report"
    write_report(read_study(st.load(st.open_storage(cpu_url), NAME)), cpu_out)
    assert not (cpu_out / "energy.png").exists() and "energy" not in (cpu_out / "report.md").read_text()
