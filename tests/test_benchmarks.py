"""The benchmark scripts still run (tiny versions, a few seconds each) and their
arithmetic is right. No timing is asserted: figures live in benchmarks/results/."""

from __future__ import annotations

import json
import random
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

GRID = REPO / "benchmarks" / "data" / "grid_digits_cnn_cpu.json"
PARTS_GRID = REPO / "benchmarks" / "data" / "grid_digits_mlp_cpu_parts.json"  # recorded with --parts


def _main(module, argv, monkeypatch):
    monkeypatch.setattr(sys, "argv", [module.__file__, *argv])
    return module.main()


def test_hypervolume_is_exact():
    from search_efficiency import REF, hypervolume

    assert hypervolume([(0.0, 0.0, 0.0)]) == pytest.approx(REF**3)
    assert hypervolume([(0.5, 0.5, 0.5), (0.6, 0.6, 0.6)]) == pytest.approx(0.6**3)  # dominated point adds 0
    assert hypervolume([(0, 1, 1), (1, 0, 1), (1, 1, 0)]) == pytest.approx(3 * 0.011 - 3 * 0.001 + 0.001)
    rng = random.Random(1)
    points = [tuple(rng.random() for _ in range(3)) for _ in range(5)]
    inside = sum(any(all(p[i] <= q[i] for i in range(3)) for p in points)
                 for q in ([rng.random() * REF for _ in range(3)] for _ in range(40000)))
    assert hypervolume(points) == pytest.approx(inside / 40000 * REF**3, rel=0.03)


def test_spearman():
    from fidelity import spearman

    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2], [1, 2]) is None


def test_replay_answers_from_the_grid_and_refuses_other_configs():
    from advisor.core.config import TrialConfig
    from advisor.core.results import TrialPayload, TrialSettings

    from replay import Grid, ReplayExecutor

    def payload(config: TrialConfig) -> TrialPayload:
        return TrialPayload("digits_cnn.py", "", "0" * 64, config, TrialSettings(train_samples=1))

    grid = Grid.load(GRID)
    assert len(grid.runs) == 128 and grid.doc["repeats"] >= 2
    executor = ReplayExecutor(grid, seed=3)
    config = TrialConfig(batch_size=128, precision="bf16")
    answer = executor.submit(0, payload(config))
    [(_, result)] = executor.wait([answer], timeout=0)
    recorded = grid.runs[config.key()]
    assert result.throughput in [r["throughput"] for r in recorded]
    with pytest.raises(KeyError, match="not in the recorded grid"):
        executor.submit(1, payload(TrialConfig(batch_size=16)))


def test_search_efficiency_tiny(tmp_path, monkeypatch):
    import search_efficiency

    out = tmp_path / "se.json"
    assert _main(search_efficiency, ["--tiny", "-o", str(out)], monkeypatch) == 0
    doc = json.loads(out.read_text())
    assert set(doc["median_curves"]) == {"default", "random"} and doc["budget"] == 5
    for curve in doc["median_curves"].values():
        assert all(0 <= v <= 1 + 1e-9 for v in curve)
        assert all(b >= a - 1e-12 for a, b in zip(curve, curve[1:]))  # never decreases
    assert out.with_suffix(".png").exists()
    oracle = doc["oracle_curve"]  # knowing the grid: never below any strategy's median curve
    assert len(oracle) == 5 and all(b >= a - 1e-12 for a, b in zip(oracle, oracle[1:]))
    assert all(o >= m - 1e-9 for curve in doc["median_curves"].values() for o, m in zip(oracle, curve))


def test_replay_answers_each_part_from_its_recording_on_a_clock():
    from dataclasses import replace

    from advisor.core.config import TrialConfig
    from advisor.core.results import TrialPayload, TrialSettings
    from advisor.core.two_stage import Gate

    from replay import Grid, ReplayExecutor

    grid = Grid.load(PARTS_GRID)
    config = TrialConfig(batch_size=64)
    settings = TrialSettings(train_samples=1)
    executor = ReplayExecutor(grid, seed=0)
    [probe] = grid.parts[config.key()]["probe"]
    [run] = grid.parts[config.key()]["training"]
    answer = executor.submit(3, TrialPayload("m.py", "", "0" * 64, config, replace(settings, part="probe")))
    assert answer.result.throughput == probe["throughput"] and answer.result.score is None
    assert answer.result.telemetry["fingerprint"] == probe["fingerprint"]
    assert executor.clock == pytest.approx(probe["wall_s"]) and executor.finished_at[3] == executor.clock
    answer = executor.submit(3, TrialPayload("m.py", "", "0" * 64, config, replace(settings, part="training")))
    assert answer.result.score == run["accuracy"] and answer.result.throughput is None
    assert executor.clock == pytest.approx(probe["wall_s"] + run["wall_s"])
    first, second = run["curve"][:2]  # floors above the recorded curve stop it at the second point behind
    gate = Gate((first["samples"], second["samples"]), (first["metric"] + 0.5, second["metric"] + 0.5), None,
                (first["metric"] + 0.6, second["metric"] + 0.6))
    before = executor.clock
    answer = executor.submit(4, TrialPayload("m.py", "", "0" * 64, config, replace(settings, part="training"),
                                             gate.to_dict()))
    stop = answer.result.telemetry["early_stop"]
    assert stop["samples"] == second["samples"] and answer.result.score == second["metric"]
    assert executor.clock - before == pytest.approx(run["wall_s"] * stop["fraction"])


def test_two_stage_tiny(tmp_path, monkeypatch):
    import two_stage

    out = tmp_path / "t.json"
    assert _main(two_stage, ["--tiny", "-o", str(out)], monkeypatch) == 0
    doc = json.loads(out.read_text())
    grid = doc["grids"]["digits_mlp"]
    selective, everything = grid["modes"]["selective"]["runs"][0], grid["modes"]["all"]["runs"][0]
    assert selective["counts"]["probes"] == 8 and everything["counts"]["probes"] == 0
    assert everything["counts"]["completed"] == 8
    for run in (selective, everything):
        assert 0 < run["time_to_95_s"] <= run["study_s"] and 0 <= run["hv_final"] <= 1 + 1e-9
    assert doc["wall_ratio_vs_previous_default"] == grid["wall_ratio"] > 0


def test_best_first_curve_reaches_the_whole_front():
    from search_efficiency import Scorer

    from replay import Grid

    scorer = Scorer(Grid.load(GRID), max_drop=0.01)
    curve = scorer.oracle(len(scorer.feasible))
    assert curve[-1] == pytest.approx(1.0)
    assert curve[0] == scorer.oracle(1)[0] and 0 < curve[0] < 1


@pytest.mark.ray
def test_overhead_tiny(ray_session, tmp_path, monkeypatch):
    import overhead

    out = tmp_path / "o.json"
    assert _main(overhead, ["--tiny", "-o", str(out)], monkeypatch) == 0
    doc = json.loads(out.read_text())
    assert doc["trials"] == 2 and 0 < doc["fraction"] < 1 and doc["fixed_per_trial_s"] > 0
    parts = doc["breakdown"]
    assert parts["in_trial_compute_s"] > 0 and parts["sampler_s"] > 0 and parts["storage_s"] > 0
    # compute as the product counts it (a trial's training part included), so no training is called overhead
    from advisor.core.results import TrialResult

    runs = [TrialResult(ok=True, phase_s=t["phase_s"]) for t in doc["per_trial"]]
    assert parts["in_trial_compute_s"] == pytest.approx(sum(r.compute_s for r in runs))


@pytest.mark.ray
def test_fidelity_tiny(ray_session, tmp_path, monkeypatch):
    import fidelity

    out = tmp_path / "f.json"
    assert _main(fidelity, ["--tiny", "-o", str(out)], monkeypatch) == 0
    doc = json.loads(out.read_text())
    assert len(doc["repeats"]) == 2 and doc["throughput_cv"] >= 0 and doc["memory_spread"] >= 0
    assert doc["studies"]["configurations_in_both"] >= 1


def test_summary_holds_the_headline_keys():
    doc = json.loads((REPO / "benchmarks" / "results" / "summary.json").read_text())
    for key in ("search.hv_fraction_at_10pct_grid", "search.trials_ratio_vs_random", "overhead.fraction",
                "overhead.fixed_per_trial_s", "fidelity.throughput_cv", "fidelity.memory_spread",
                "trust.pick_ratio_agreement", "trust.disturbed_baseline_error", "trust.confirm_share",
                "trust.ci_halfwidth"):
        section, name = key.split(".")
        entry = doc[section][name]
        assert isinstance(entry["value"], (int, float)) and entry["date"] and entry["commit"], key


def test_trust_figures_from_study_figures():
    """benchmarks/trust.py's arithmetic on two hand-made runs (the runs themselves take
    minutes: python benchmarks/trust.py)."""
    import trust

    def run(fast: float, bal: float, raw: float, interval=(0.9, 1.1)):
        trials = {"f": {"trial": 1, "config": "bf16", "raw_ratio": raw, "shown_ratio": fast, "confirmed": True,
                        "interval": [fast * interval[0], fast * interval[1]], "pairs": 8},
                  "b": {"trial": 2, "config": "cl", "raw_ratio": raw, "shown_ratio": bal, "confirmed": True,
                        "interval": [bal * interval[0], bal * interval[1]], "pairs": 8}}
        return {"trials": trials, "picks": {"fastest": "f", "balanced": "b"}}

    a, b = run(1.50, 1.10, 1.6), run(1.53, 1.10, 3.2)
    got = trust.agreement(a, b)
    assert got["value"] == pytest.approx(abs(1.50 / 1.53 - 1)) and got["picks_consistent"]
    assert got["fastest"]["same_config"] and got["fastest"]["both_confirmed"]
    d = trust.disturbed_error(a, b)
    assert d["value"] == pytest.approx(abs(1.53 / 1.50 - 1)) and d["unconfirmed_value"] == pytest.approx(1.0)
    assert trust.disturbed_error(a, {"trials": {}, "picks": {}})["value"] is None


def test_real_study_time_to_reach():
    """benchmarks/real_study.py's t_B on hand-made trials (the run itself takes half an hour):
    the first feasible trial other than the baseline at or above the bar."""
    import real_study

    trials = [{"trial": 0, "baseline": True, "at_s": 10.0, "feasible": True, "ratio": 1.0},
              {"trial": 1, "baseline": False, "at_s": 20.0, "feasible": False, "ratio": 2.0},
              {"trial": 2, "baseline": False, "at_s": 30.0, "feasible": True, "ratio": 1.2},
              {"trial": 3, "baseline": False, "at_s": 40.0, "feasible": True, "ratio": None},
              {"trial": 4, "baseline": False, "at_s": 50.0, "feasible": True, "ratio": 1.6}]
    assert real_study.time_to_reach(trials, 1.0) == 30.0
    assert real_study.time_to_reach(trials, 1.5) == 50.0
    assert real_study.time_to_reach(trials, 1.7) is None


def test_probe_rules_replayed_on_traces_with_a_known_answer(tmp_path, monkeypatch):
    """The replay's 'before' rule and the product's timer on made-up traces: a steady one
    (both give its step time; the timer stops at its minimum of blocks) and one with a slow
    start (the before rule's fixed warm-up eats 0.25 s of it; the timer cuts it as it shows)."""
    import probe_stopping

    steady = [(0.005, 5)] * 600  # 1 ms steps in 5-step blocks: 3 s
    fig, cost = probe_stopping.before(steady)
    assert fig == pytest.approx(0.001) and cost == pytest.approx(0.25 + 0.5, abs=0.01)  # warm-up + 10 blocks
    fig, cost, timing = probe_stopping.now(steady, tolerance=0.05, cap=0.75)
    assert fig == pytest.approx(0.001) and timing["converged"] and cost == pytest.approx(0.3, abs=0.01)
    slow_start = [(0.015, 5)] * 8 + steady
    fig, cost, timing = probe_stopping.now(slow_start, tolerance=0.05, cap=0.75)
    assert fig == pytest.approx(0.001) and timing["warmup_blocks"] >= 1
    traces = {"commit": "x", "date": "d", "cases": {"made-up": {"example": "-", "workload": "train", "config": {},
                                                                "runs": [{"blocks_s": [0.001] * 600,
                                                                          "steps_per_block": 5}] * 2}}}
    (tmp_path / "t.json").write_text(json.dumps(traces))
    out = tmp_path / "s.json"
    assert _main(probe_stopping, [str(tmp_path / "t.json"), "-o", str(out)], monkeypatch) == 0
    doc = json.loads(out.read_text())
    assert doc["cost_ratio_median"] == pytest.approx(0.3 / 0.75, abs=0.02) and doc["interval_covers_before"] == 1.0


def test_probe_traces_and_cost_tiny(tmp_path, monkeypatch):
    """probe_traces.py records one short case in a child process; probe_cost.py reads a
    study's probes and training runs back (a made-up study, named as such)."""
    import optuna
    import probe_cost
    import probe_traces

    out = tmp_path / "traces.json"
    assert _main(probe_traces, ["--cases", "mlp-bs32", "--repeats", "1", "--seconds", "0.2", "-o", str(out)],
                 monkeypatch) == 0
    run = json.loads(out.read_text())["cases"]["mlp-bs32"]["runs"][0]
    assert len(run["blocks_s"]) >= 5 and run["steps_per_block"] >= 1 and run["phase_s"]["timing"] > 0
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = f"sqlite:///{tmp_path / 'made-up.db'}"
    study = optuna.create_study(storage=url, study_name="made-up")
    for timing, probe, training in ((0.5, 1.0, 4.0), (0.3, 0.8, None), (0.4, 0.9, 3.0)):
        t = study.ask()
        t.set_user_attr("phase_s", {"timing": timing, "total": probe - 0.1})
        t.set_user_attr("probe_wall_s", probe)
        if training:
            t.set_user_attr("accuracy_run", {"wall_s": training, "phase_s": {"total": training - 0.2}})
        study.tell(t, 1.0)
    result = tmp_path / "cost.json"
    assert _main(probe_cost, [f"now={tmp_path / 'made-up.db'}", "-o", str(result)], monkeypatch) == 0
    now = json.loads(result.read_text())["by_label"]["now"]
    assert now["probes"] == 3 and now["with_training_run"] == 2 and now["timing_s"] == 0.4
    assert now["probe_over_training_wall"] == pytest.approx((1.0 / 4.0 + 0.9 / 3.0) / 2)
