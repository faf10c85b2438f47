"""`advisor measure`: an exported config measured again in pairs against its baseline,
plus a full run for the metric (real Ray, the digits MLP), compared with the stored
figures; bad input refused before anything runs."""

from __future__ import annotations

import json

import pytest
import yaml

from advisor.cli.main import main

from conftest import EXAMPLES
from recorded_study import write_recorded_study

MLP = str(EXAMPLES / "digits_mlp.py")


@pytest.fixture
def exported(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = write_recorded_study(url)
    study.set_user_attr("workload_path", MLP)
    study.set_user_attr("settings", {"train_samples": 1437, "seed": 0, "device": "cpu", "workload": "train"})
    path = tmp_path / "bf16.yaml"
    assert main(["export", "--storage", url, "--trial", "1", "-o", str(path)]) == 0
    capsys.readouterr()
    return path


@pytest.mark.ray
def test_measure_pairs_against_the_baseline_and_compares(ray_session, exported, capsys):
    assert main(["measure", MLP, "--config", str(exported), "--pairs", "2", "--json"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["config"]["precision"] == "bf16" and data["source"]["trial"] == 1
    assert data["baseline"]["precision"] == "fp32"  # the export's baseline, run beside it
    pairs = data["confirmation"]["pairs"]
    left_out = sum(1 for p in pairs if p["disturbed"])  # kept, not counted while clean ones exist
    counted = len(pairs) - left_out if left_out < len(pairs) else len(pairs)
    assert counted == 2 and len(pairs) <= 4 and data["confirmation"]["status"] == "capped"  # a disturbed pair: +1
    for p in pairs:
        assert p["throughput_ratio"] == pytest.approx(p["config_throughput"] / p["baseline_throughput"])
        assert 0 < p["position"] < 1
    thr = data["figures"]["throughput_ratio"]
    now = thr["now"]
    assert now["n"] == 2 and now["low"] <= now["center"]
    assert now["high"] is None or now["center"] <= now["high"]  # one pair counted: unbounded
    assert thr["stored"] == pytest.approx(10240.0 / 6736.0) and thr["stored_confirmed"] is False
    assert thr["stored_within_now"] == (now["low"] <= thr["stored"] <= now["high"])
    assert data["full_run"]["ok"] and data["full_run"]["score"] is not None and "accuracy" not in data["full_run"]
    assert data["figures"]["score"]["difference"] == pytest.approx(data["full_run"]["score"] - 0.9639)
    assert data["figures"]["score"]["same_seed"] is True  # the study's run at its seed, which the full run repeats
    # the recorded study names another file (and hash) than the MLP measured now: said so
    assert any("is not the file the config was measured with" in n for n in data["notes"])
    # the pair lines (a note may say "pair" too: under load, "... marked in its pair and left out")
    assert sum(line.startswith("pair ") for line in captured.err.splitlines()) == len(pairs)
    assert "full run" in captured.err


@pytest.mark.ray
def test_measure_without_a_stored_baseline_uses_model_py(ray_session, exported, capsys):
    document = yaml.safe_load(exported.read_text())
    document.pop("baseline")
    assert len(document["source"]["config_sha256"]) == 64  # what the figures are of
    document["config"]["batch_size"] = 16  # and edited by hand: the stored figures are of another config
    exported.write_text(yaml.safe_dump(document))
    assert main(["measure", MLP, "--config", str(exported), "--pairs", "1", "--no-metric"]) == 0
    out = capsys.readouterr()
    assert "its config is not the one trial 1 measured (edited after the export)" in " ".join(out.out.split())
    assert "outside today's interval" not in out.out and "within today's interval" not in out.out
    assert "names no baseline" in out.out and "baseline  bs=32 fp32" in out.out
    assert "throughput vs baseline" in out.out
    assert not any(line.startswith("full run") for line in out.out.splitlines())  # --no-metric


def test_the_metric_is_compared_with_the_studys_run_at_the_same_seed():
    """A review's `advisor measure` printed -7.5 pt: one run at seed 0 against a three-seed
    mean (the trial read as the baseline's), with nothing about the seeds' spread of 22 pt.
    An export has the study's run at its seed: the full run repeats that run."""
    from rich.console import Console

    from advisor.core.config import TrialConfig
    from advisor.core.metric import MetricSpec
    from advisor.core.results import TrialResult
    from advisor.outputs.remeasure import Remeasured, comparison_table

    document = {"measured": {"score": 0.5139, "seed_score": 0.4389,
                             "vs_baseline": {"metric_noise_epsilon": 0.2179}}}
    result = Remeasured(TrialConfig(), TrialConfig(), document, full_run=TrialResult(ok=True, score=0.4389),
                        metric=MetricSpec())
    console = Console(width=300, record=True)
    console.print(comparison_table(result))
    text = " ".join(console.export_text().split())
    assert "│ accuracy │ 0.4389 │ 0.4389 │ +0.0 pt (the study's seed-to-seed noise: +-21.79 pt) │" in text
    assert "against the study's run at the same seed" in text
    older = Remeasured(TrialConfig(), TrialConfig(), {"measured": {"score": 0.5139}},
                       full_run=TrialResult(ok=True, score=0.4389))
    assert older.metric_figures()["stored"] == 0.5139 and older.metric_figures()["same_seed"] is False


def test_the_table_counts_the_pairs_it_reads_and_gives_no_verdict_on_an_unbounded_interval():
    """A review's `measure`: 'now (2 pairs ...)' over a cell of 1 pair, a stored '(0.00-inf)',
    and 'stored ratio within today's interval' of an unbounded one."""
    from rich.console import Console

    from advisor.core.config import TrialConfig
    from advisor.core.pairs import Confirmation, Pair
    from advisor.outputs.remeasure import Remeasured, comparison_table

    pairs = [Pair(0.5, 1000.0, 1900.0, 100.0, 100.0), Pair(0.5, 1000.0, 200.0, 100.0, 100.0, disturbed="moved")]
    document = {"measured": {"vs_baseline": {"throughput_ratio": 1.92, "confirmed": True,
                                             "throughput_interval": [0.0, None], "pairs": 1}}}
    result = Remeasured(TrialConfig(), TrialConfig(), document, confirmation=Confirmation(1, pairs, "capped"))
    console = Console(width=300, record=True)
    console.print(comparison_table(result))
    text = " ".join(console.export_text().split())
    assert "now (1 pair against the baseline; 1 disturbed left out)" in text
    assert "│ throughput vs baseline │ 1.92x (unbounded) │" in text and "0.00-inf" not in text
    assert "today's interval is unbounded: no verdict" in text and "within today's interval" not in text


@pytest.mark.parametrize("change, message", [
    (lambda d: d["config"].update(precision="fp64"), "config.precision: expected one of"),
    (lambda d: d["config"].update(warp_speed=True), "config.warp_speed: unknown key"),
    (lambda d: d.update(advisor_config=99), "advisor_config is 99"),
    (lambda d: d.update(konfig=d.pop("config")),
     "with no config key: found advisor_config, baseline, hardware, konfig"),
    (lambda d: (d["source"].update(workload_kind="inference"), d["config"].update(activation_checkpointing=True)),
     "cannot run as a inference workload: activation_checkpointing=True only applies to training"),
])
def test_bad_config_is_refused_before_anything_runs(exported, capsys, change, message):
    document = yaml.safe_load(exported.read_text())
    document["config"].update(pin_memory=False)
    change(document)
    exported.write_text(yaml.safe_dump(document))
    assert main(["measure", MLP, "--config", str(exported)]) == 2
    assert message in capsys.readouterr().err


def test_missing_files_and_bad_repeats_exit_2(exported, tmp_path, capsys):
    assert main(["measure", MLP, "--config", str(tmp_path / "none.yaml")]) == 2
    assert "cannot read config file" in capsys.readouterr().err
    assert main(["measure", str(tmp_path / "none.py"), "--config", str(exported)]) == 2
    assert "none.py" in capsys.readouterr().err
    assert main(["measure", MLP, "--config", str(exported), "--repeats", "0"]) == 2
    assert "--pairs must be at least 1" in capsys.readouterr().err
    assert main(["measure", MLP, "--config", str(exported), "--pairs", "0"]) == 2
    assert "--pairs must be at least 1" in capsys.readouterr().err
    assert main(["measure", MLP, "--config", str(exported), "--pairs", "2", "--repeats", "3"]) == 2
    assert "disagree" in capsys.readouterr().err


def test_an_interval_too_wide_to_decide_says_so():
    """Two pairs on a machine under load gave 0.23x (0.00-141599316.01): the table said it
    and nothing more. Now a note says it cannot tell, why, and what to do."""
    from advisor.core.config import TrialConfig
    from advisor.core.pairs import Confirmation, Pair
    from advisor.outputs.remeasure import Remeasured

    def measured(*ratios):
        c = Confirmation(0, pairs=[Pair(0.5, 1000.0, 1000.0 * r, 1e6, 1e6, sitting=1) for r in ratios])
        return Remeasured(TrialConfig(precision="bf16"), TrialConfig(), {}, confirmation=c)

    wild = measured(1.12, 0.05)
    assert "too wide to tell the config from the baseline" in wild.too_noisy()
    assert "more --pairs" in wild.too_noisy() and wild.to_dict()["too_noisy"] == wild.too_noisy()
    assert measured(1.50, 1.52, 1.49).too_noisy() is None  # tight: nothing to say
    assert measured(1.12).too_noisy() is None  # one pair: unbounded, which the table says


def test_an_inference_configs_latency_is_compared_with_the_stored_one():
    """A review's `advisor measure` of an inference export showed no latency: the full run's
    p99 now stands beside the exported one (one run each, their ratio), marked where busy."""
    from rich.console import Console

    from advisor.core.config import TrialConfig
    from advisor.core.latency import Latency
    from advisor.core.results import TrialResult
    from advisor.outputs.remeasure import Remeasured, comparison_table, describe_run

    then = Latency(64, 200, 3.1, 5.0, 5.76)
    now = Latency(64, 180, 3.2, 5.4, 6.0, 0.25, 0.4, 50, busy=True)
    run = TrialResult(ok=True, throughput=47000.0, peak_memory_bytes=11 << 20, score=0.92,
                      telemetry={"latency": now.to_dict()})
    result = Remeasured(TrialConfig(batch_size=64), TrialConfig(), {"measured": {"latency": then.to_dict()}},
                        full_run=run)
    console = Console(width=300, record=True)
    console.print(comparison_table(result))
    text = " ".join(console.export_text().split())
    assert "│ p99 latency at batch 64 │ 5.76 ms │ 6.00 ms (busy) │ 1.04x the stored (one run each) │" in text
    assert result.to_dict()["figures"]["latency"]["p99_ratio"] == pytest.approx(6.0 / 5.76)
    assert describe_run(run).endswith(", latency p50 3.20 ms p99 6.00 ms at batch 64, batch 1 0.250 ms (busy)")
    training = Remeasured(TrialConfig(), TrialConfig(), {"measured": {}}, full_run=TrialResult(ok=True, score=0.9))
    assert training.latency_figures() is None and "latency" not in training.to_dict()["figures"]
