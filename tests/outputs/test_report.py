"""`advisor report`: report.md and its PNG plots from the recorded study (fixed figures, real SQLite)."""

from __future__ import annotations

import re
import shlex
import sys

import pytest
import yaml

from advisor.cli.main import main
from advisor.core.errors import StudyError
from advisor.core.stored import read_study
from advisor.outputs import report_plots
from advisor.outputs.report import write_report
from advisor.outputs.summary import knob_effects
from advisor.study.storage import stores as st

from recorded_study import NAME, write_recorded_study

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
FRONT = (0, 1, 2, 3, 4, 7, 10)  # the recorded study's feasible Pareto front (5 and 6 are infeasible)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """The recorded study in SQLite and its report, written once through the CLI."""
    root = tmp_path_factory.mktemp("report")
    url = f"sqlite:///{root}/study.db"
    write_recorded_study(url)
    out = root / "nested" / "dirs" / "report"  # parents are created too
    rc = main(["report", "--storage", url, "-o", str(out)])
    text = (out / "report.md").read_text() if (out / "report.md").exists() else ""
    return {"url": url, "out": out, "rc": rc, "text": text}


def table_row(text: str, first_cell: str) -> str:
    rows = [line for line in text.splitlines() if line.startswith(f"| {first_cell} |")]
    assert len(rows) == 1, f"expected one row starting with {first_cell!r}, found {rows}"
    return rows[0]


def test_report_writes_markdown_and_three_plots(recorded):
    assert recorded["rc"] == 0
    out = recorded["out"]
    assert sorted(p.name for p in out.iterdir()) == ["knobs.png", "metric.png", "pareto.png", "report.md"]
    text = recorded["text"]
    assert text.startswith(f"# Study {NAME}: advisor report\n")
    for line in ("- Workload: `/home/me/examples/digits_cnn.py` (train)", "- Search space: cpu",
                 "- Hardware: AMD EPYC, 2 CPU cores; GPUs: none",
                 "- Software: torch 2.13.0+cpu, torchao 0.18.0, CUDA -, Python 3.11.7",
                 "- Max metric drop: 1.0 pt vs the baseline; memory cap: none",
                 "- Trials run: 11 (completed 9, failed 2: error 1, oom 1)",
                 "- Infeasible (completed, but over the metric drop or the memory cap): 2",
                 "- Duplicates (answered from an earlier trial): 0; skipped without running: 0"):
        assert line in text.splitlines()
    links = re.findall(r"!\[[^\]]+\]\(([^)]+)\)", text)
    assert links == ["pareto.png", "metric.png", "knobs.png"]  # relative, beside report.md
    assert "marginal medians over the trials the search happened to run" in text
    assert "not controlled one-knob experiments" in text


def test_cli_says_where_it_wrote(tmp_path, capsys):
    url = f"sqlite:///{tmp_path}/study.db"
    write_recorded_study(url)
    capsys.readouterr()
    assert main(["report", "--storage", url, "-o", str(tmp_path / "r")]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {tmp_path / 'r' / 'report.md'} (and its plots beside it)"


def test_pareto_table_has_the_front_with_ratios_and_the_baseline_marked(recorded):
    text = recorded["text"]
    for number in FRONT:
        table_row(text, f"{number} (baseline)" if number == 0 else str(number))
    assert not [line for line in text.splitlines() if line.startswith(("| 5 |", "| 6 |", "| 8 |", "| 9 |"))]
    assert table_row(text, "0 (baseline)") == (
        "| 0 (baseline) | `bs=64 fp32` | 6,736 | 1.00x | 98.6 MiB | 1.00x | 0.9667 | ref |")
    # trial 2: 11873 / 6736 = 1.763x, 131.0 / 98.6 = 1.329x, 0.9611 - 0.9667 = -0.56 pt
    assert table_row(text, "2") == (
        "| 2 | `bs=256 fp32 channels_last` | 11,873 | 1.76x unconfirmed | 131.0 MiB | 1.33x unconfirmed | 0.9611 | -0.6 pt |")
    assert "| 3 | `bs=64 fp32 compile` | 10,911 | 1.62x unconfirmed | 192.5 MiB | 1.95x unconfirmed | 0.9750 | +0.8 pt |" in text


def test_recommended_picks_come_with_export_commands_that_work(recorded, workdir, capsys):
    text = recorded["text"]
    # smallest: trial 4's 0.96x unconfirmed is within a CPU's resident noise (+-16%) of the baseline: a tie,
    # to the baseline (it picked trial 4, at 0.61x the speed, before)
    expected = {"fastest": 2, "smallest": 0, "best-metric": 3, "balanced": 1}
    for how, number in expected.items():
        command = f"advisor export --storage {recorded['url']} --study {NAME} --trial {number} -o {how}.yaml"
        line = next(line for line in text.splitlines() if line.startswith(f"- **{how}**:"))
        assert line.startswith(f"- **{how}**: trial {number} `") and line.endswith(f"`{command}`")
    fastest = next(line for line in text.splitlines() if line.startswith("- **fastest**"))
    assert "11,873 samples/s (1.76x unconfirmed), 131.0 MiB (1.33x unconfirmed), accuracy 0.9611 (-0.6 pt)" in fastest
    # the printed command, run as is, exports the trial it names
    argv = shlex.split(fastest.rsplit("export it: `", 1)[1].rstrip("`"))[1:]
    assert main(argv) == 0
    exported = yaml.safe_load((workdir / "fastest.yaml").read_text())
    assert exported["source"]["trial"] == 2 and exported["config"]["batch_size"] == 256


def test_failed_trials_are_listed_with_their_first_line(recorded):
    text = recorded["text"]
    failures = text.split("## Failed trials", 1)[1]
    assert "trial 8 [oom] bs=1024 fp32: CUDA out of memory. Tried to allocate 2.00 GiB" in failures
    assert "trial 9 [error] bs=64 bf16 quantization=qat_int8: RuntimeError: mat1 and mat2 must have the same dtype" \
        in failures
    assert 'File "model.py"' not in text  # only the message's first line


def test_plots_are_valid_pngs(recorded):
    import matplotlib.image

    shapes = {}
    for name in ("pareto.png", "metric.png", "knobs.png"):
        path = recorded["out"] / name
        data = path.read_bytes()
        assert data[:8] == PNG_SIGNATURE and len(data) > 1000
        assert b"matplotlib" not in data  # no Software tag: the bytes do not depend on the version
        image = matplotlib.image.imread(path)
        assert image.ndim == 3 and image.shape[2] in (3, 4)
        assert image[..., :3].std() > 0.05  # something is drawn, not a blank canvas
        shapes[name] = image.shape[:2]
    assert shapes["pareto.png"] == shapes["metric.png"] == (500, 750)
    assert shapes["knobs.png"][1] == 750 and shapes["knobs.png"][0] > 750  # one bar per knob value: tall


def test_knob_effects_match_a_hand_computation(recorded):
    """precision over the 9 completed trials (failed 8 and 9 left out; infeasible 5 and 6 kept).

    fp32: trials 0 2 3 4 5 6 7 10. Throughput sorted 4120 5219 6020 6736 | 7011 10911 11873 12500:
    median (6736 + 7011) / 2 = 6873.5, / 6736 = 1.0204. Peak MiB sorted 95.1 97.0 98.6 101.9 |
    103.4 131.0 160.0 192.5: median 102.65, / 98.6 = 1.0411. Accuracy deltas sorted -14.45 -2.23
    -0.56 0 | 0 +0.27 +0.27 +0.83 pt: median 0. bf16: trial 1 alone: 10240 / 6736 = 1.5202,
    100.2 / 98.6 = 1.0162, 0.9639 - 0.9667 = -0.28 pt.
    """
    text = recorded["text"]
    assert table_row(text, "`precision=bf16`") == "| `precision=bf16` | 1.52x | 1.02x | -0.3 pt | 1 |"
    assert table_row(text, "`precision=fp32`") == "| `precision=fp32` | 1.02x | 1.04x | +0.0 pt | 8 |"
    # batch size 64: trials 0 1 3 6 10, throughput median 6736 (the baseline's), memory median 100.2 MiB
    assert table_row(text, "`batch_size=64`") == "| `batch_size=64` | 1.00x | 1.02x | +0.0 pt | 5 |"
    # a knob that varied only among failed trials (quantization: trial 9) has no row
    assert "`quantization=" not in text and "`num_workers=" not in text

    study = read_study(st.load(st.open_storage(recorded["url"], must_exist=True), NAME))
    trials = [r for r in study.records if r.state == "complete"]
    effects = {e.label: e for e in knob_effects(study, trials)}
    fp32 = effects["precision=fp32"]
    assert fp32.n == 8
    assert fp32.throughput_ratio == pytest.approx(6873.5 / 6736)
    assert fp32.memory_ratio == pytest.approx(102.65 / 98.6, rel=1e-6)
    assert fp32.metric_delta == pytest.approx(0.0)
    assert [label for label in effects if label.startswith("batch_size=")] == [
        "batch_size=32", "batch_size=64", "batch_size=128", "batch_size=256", "batch_size=512"]


def test_same_study_gives_the_same_png_bytes(recorded, tmp_path):
    study = read_study(st.load(st.open_storage(recorded["url"], must_exist=True), NAME))
    again = write_report(study, tmp_path / "again", recorded["url"])
    assert again == tmp_path / "again" / "report.md"
    assert again.read_text() == recorded["text"]
    for name in ("pareto.png", "metric.png", "knobs.png"):
        assert (tmp_path / "again" / name).read_bytes() == (recorded["out"] / name).read_bytes()


def test_missing_storage_file_exits_2_and_writes_nothing(workdir, capsys):
    assert main(["report", "--storage", "sqlite:///missing.db", "-o", "rep"]) == 2
    assert "missing.db does not exist" in capsys.readouterr().err
    assert list(workdir.iterdir()) == []


def test_empty_storage_exits_2(workdir, capsys):
    st.open_storage("sqlite:///empty.db")
    assert main(["report", "--storage", "sqlite:///empty.db", "-o", "rep"]) == 2
    assert "holds no study" in capsys.readouterr().err
    assert not (workdir / "rep").exists()


def test_output_path_that_is_a_file_exits_2(workdir, capsys):
    write_recorded_study("sqlite:///study.db")
    (workdir / "rep").write_text("keep me")
    assert main(["report", "--storage", "sqlite:///study.db", "-o", "rep"]) == 2
    err = capsys.readouterr().err
    assert "report output rep is a file" in err
    assert (workdir / "rep").read_text() == "keep me"


def test_study_with_only_a_failed_baseline_exits_2(workdir, capsys):
    write_recorded_study("sqlite:///study.db", trials=[({}, "oom", "CUDA out of memory", None)])
    assert main(["report", "--storage", "sqlite:///study.db", "-o", "rep"]) == 2
    assert "has no completed trial yet to report on" in capsys.readouterr().err
    assert not (workdir / "rep").exists()


def test_without_matplotlib_it_says_how_to_install_and_writes_nothing(workdir, capsys, monkeypatch):
    write_recorded_study("sqlite:///study.db")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    assert main(["report", "--storage", "sqlite:///study.db", "-o", "rep"]) == 2
    assert "advisor report needs matplotlib: pip install 'advisor[report]'" in capsys.readouterr().err
    assert not (workdir / "rep").exists()


def test_a_failure_while_drawing_leaves_no_report(workdir, monkeypatch):
    study = read_study(write_recorded_study("sqlite:///study.db"))

    def broken(*args, **kwargs):
        raise RuntimeError("drawing failed")

    monkeypatch.setattr(report_plots, "_knob_chart", broken)  # the last plot: the others are drawn by then
    with pytest.raises(RuntimeError, match="drawing failed"):
        write_report(study, workdir / "rep")
    assert list((workdir / "rep").iterdir()) == []  # no report.md, no plots, no temporary directory


def test_study_error_is_raised_for_a_file_in_the_way(workdir):
    study = read_study(write_recorded_study("sqlite:///study.db"))
    (workdir / "rep").write_text("")
    with pytest.raises(StudyError, match="is a file"):
        write_report(study, "rep")


def test_the_trial_count_accounts_for_probed_only_trials(tmp_path):
    """A review's report read 'Trials run: 5 (completed 4, failed 0)': the fifth was probed only."""
    from recorded_study import add_probed_trial

    url = f"sqlite:///{tmp_path}/study.db"
    add_probed_trial(write_recorded_study(url))
    assert main(["report", "--storage", url, "-o", str(tmp_path / "r")]) == 0
    assert "- Trials run: 12 (completed 9, probed only 1, failed 2: error 1, oom 1)" in \
        (tmp_path / "r" / "report.md").read_text().splitlines()


def test_a_disturbed_baseline_shows_the_reference_as_tunes_table_does(tmp_path):
    """A review's report listed the baseline at its disturbed first run (25,052 samples/s)
    beside tune's and `advisor trials`' re-measured reference (30,239)."""
    import optuna

    from advisor.core.stored import BASELINE_DISTURBED, BASELINE_MEASUREMENTS

    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = write_recorded_study(url)
    later = max(t.datetime_complete.timestamp() for t in study.trials if t.datetime_complete) + 10
    study.set_user_attr(BASELINE_MEASUREMENTS, [{"at": later + i, "throughput": v}
                                                for i, v in enumerate((7000.0, 7100.0, 7050.0))])
    study.set_user_attr(BASELINE_DISTURBED, "its first run: the sentinel read 9x apart")
    text = write_report(read_study(optuna.load_study(study_name=NAME, storage=url)), tmp_path / "r").read_text()
    assert table_row(text, "0 (baseline)").startswith("| 0 (baseline) | `bs=64 fp32` | 7,050 | 1.00x |")
    assert "The baseline's first run was disturbed: its samples/s is the median of its latest re-measurements" in text


def test_a_disturbed_baseline_is_the_reference_in_every_view(tmp_path):
    """A review (a busy machine, a tiny transformer): trial 0's disturbed run read 218
    samples/s, the re-measured reference 3,559. The front table showed the reference, but
    "Recommended" and the export showed 218, and each knob's effect read 28x and 19x beside
    the front's 2.8x and 1.9x. Every view now takes the reference."""
    from advisor.core.config import TrialConfig
    from advisor.core.objectives import Figures
    from advisor.core.stored import BASELINE_DISTURBED, BASELINE_MEASUREMENTS, StoredStudy, TrialRecord
    from advisor.outputs.export import export_document

    def record(number, thr, mem, at, **config):
        return TrialRecord(number, "complete", TrialConfig.from_dict({"batch_size": 32, **config}),
                           Figures(thr, mem, 0.9), {"accuracy_drop": 0.0}, baseline=number == 0, finished_at=at,
                           attrs={"throughput": thr, "peak_memory_bytes": mem})

    records = [record(0, 218.0, 100.0, 0.0), record(1, 6700.0, 150.0, 10.0, precision="bf16"),
               record(2, 9800.0, 180.0, 20.0, batch_size=64)]
    attrs = {BASELINE_MEASUREMENTS: [{"at": at, "throughput": 3500.0} for at in (1.0, 2.0, 3.0)],
             BASELINE_DISTURBED: "its first run: the sentinel read 9x apart"}
    study = StoredStudy("s", attrs, records)
    effects = {e.label: e for e in knob_effects(study, records)}
    assert effects["precision=bf16"].throughput_ratio == pytest.approx(6700 / 3500)  # was 6700 / 218: 30.7x
    assert effects["batch_size=64"].throughput_ratio == pytest.approx(9800 / 3500)
    assert effects["precision=fp32"].throughput_ratio == pytest.approx((1.0 + 9800 / 3500) / 2)
    text = write_report(study, tmp_path / "r").read_text()
    smallest = next(line for line in text.splitlines() if line.startswith("- **smallest**"))
    assert smallest.startswith("- **smallest**: trial 0 `bs=32 fp32`: 3,500 samples/s (1.00x)"), smallest
    assert "| `precision=bf16` | 1.91x |" in text
    measured = export_document(study, records[0])["measured"]
    assert measured["throughput"] == 3500.0 and measured["throughput_first_run"] == 218.0
    assert measured["throughput_note"].startswith("The baseline's first run was disturbed")
    assert "throughput_first_run" not in export_document(study, records[1])["measured"]
    from advisor.outputs.summary import front_rows

    rows = {row.record.number: row.to_dict() for row in front_rows(study)}  # tune --json, report --json
    assert rows[0]["throughput"] == 218.0 and rows[0]["reference_throughput"] == 3500.0
    assert "reference_throughput" not in rows[2]


def test_the_trials_table_says_which_reference_an_unconfirmed_ratio_is_to():
    """A review read 3,359 samples/s at 0.83x beside a baseline of 3,296: the ratio was to the
    baseline as measured by then (4,033), which no cell showed. The note column says it where
    it differs from the baseline's row by more than 5%."""
    import io

    from rich.console import Console

    from advisor.core.config import TrialConfig
    from advisor.core.objectives import Figures
    from advisor.core.stored import BASELINE_DISTURBED, BASELINE_MEASUREMENTS, StoredStudy, TrialRecord
    from advisor.outputs.listing import trial_lines, trials_table

    def record(number, thr, at, **config):
        return TrialRecord(number, "complete", TrialConfig.from_dict({"batch_size": 16, **config}),
                           Figures(thr, 100.0, 0.9), {"accuracy_drop": 0.0}, baseline=number == 0, finished_at=at,
                           attrs={"throughput": thr, "peak_memory_bytes": 100.0})

    records = [record(0, 900.0, 0.0), record(1, 3359.0, 10.0, precision="bf16"),
               record(2, 3500.0, 100.0, batch_size=32)]
    measured = [{"at": at, "throughput": v} for at, v in ((5.0, 4033.0), (6.0, 4033.0), (7.0, 4040.0),
                                                           (90.0, 3296.0), (91.0, 3296.0), (92.0, 3300.0))]
    study = StoredStudy("s", {BASELINE_MEASUREMENTS: measured, BASELINE_DISTURBED: "its first run"}, records)
    console = Console(file=io.StringIO(), width=400)
    console.print(trials_table(study, trial_lines(study)))
    rows = {line.split("│")[1].strip(): line for line in console.file.getvalue().splitlines() if "│" in line}
    assert "3,296" in rows["0 (baseline)"] and "0.83x unconfirmed" in rows["1"]
    assert "ratio to the baseline as measured by then: 4,033 samples/s" in rows["1"]
    assert "as measured by then" not in rows["2"]  # its reference is the baseline's row: nothing to say
