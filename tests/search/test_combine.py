"""The default strategy's combination step (advisor/search/combine.py): which one-knob changes
count, how combinations are predicted and chosen, and a real study that runs them."""

from __future__ import annotations

import math

import optuna
import pytest

from advisor.cli.main import main
from advisor.core.config import TrialConfig
from advisor.core.objectives import REF, Figures, Limits, hypervolume
from advisor.search.combine import candidates, choose, combination_configs, moves

from conftest import EXAMPLES

BASE = TrialConfig(batch_size=64)
BASE_FIG = Figures(1000.0, 100.0, 0.90)
MEASURED = [
    (BASE.replace(precision="bf16"), (1500.0, 102.0, 0.895)),           # faster, accuracy held
    (BASE.replace(channels_last=True), (1300.0, 100.0, 0.90)),          # faster
    (BASE.replace(grad_accumulation=2), (980.0, 90.0, 0.905)),          # smaller, a little more accurate
    (BASE.replace(batch_size=128), (1400.0, 120.0, 0.70)),              # faster, but lost accuracy: lossy
    (BASE.replace(pruning="l1_unstructured"), (900.0, 104.0, 0.89)),    # worse at everything: no move
    (BASE.replace(activation_checkpointing=True), (1020.0, 98.0, 0.9)),  # within the noise margin: no move
    (BASE.replace(batch_size=32), None),                                 # failed
    (BASE.replace(precision="bf16", channels_last=True), (1900.0, 101.0, 0.9)),  # two knobs: not a move
]


def test_moves_are_the_one_knob_changes_that_paid_off():
    found = {(m.knob, m.value): m for m in moves(BASE, BASE_FIG, MEASURED, max_drop=0.01)}
    assert set(found) == {("precision", "bf16"), ("channels_last", True), ("grad_accumulation", 2),
                          ("batch_size", 128)}
    assert found[("batch_size", 128)].lossy and not found[("precision", "bf16")].lossy
    assert found[("precision", "bf16")].speed == pytest.approx(1.5)
    assert found[("grad_accumulation", 2)].memory == pytest.approx(0.9)


def test_combinations_multiply_speed_and_memory_and_take_the_worst_accuracy():
    found = moves(BASE, BASE_FIG, MEASURED, max_drop=0.01)
    pool = {tuple(sorted((k, v) for k, v in c.to_dict().items() if BASE.to_dict()[k] != v)): f
            for c, f in candidates(BASE, found, BASE_FIG)}
    t, m, a = pool[(("channels_last", True), ("precision", "bf16"))]
    assert t == pytest.approx(1000 * 1.5 * 1.3) and m == pytest.approx(100 * 1.02)
    assert a == pytest.approx(0.895)  # bf16's, the worse of the two; not the sum
    # the lossy larger batch is tried with moves that held accuracy; its own loss left out
    t, m, a = pool[(("batch_size", 128), ("grad_accumulation", 2))]
    assert t == pytest.approx(1400 * 0.98) and a == pytest.approx(0.90)
    assert all(sum(k == "batch_size" for k, _ in combo) <= 1 for combo in pool)
    assert len(pool) == 2**4 - 4 - 1  # every subset of two or more of the four moves


def test_choose_spreads_over_the_trade_offs_and_respects_the_rules():
    feasible = lambda f: f[2] >= 0.89  # noqa: E731
    fast = (BASE.replace(precision="bf16", channels_last=True), (1950.0, 102.0, 0.895))
    faster_copy = (BASE.replace(precision="bf16", channels_last=True, pruning="l1_unstructured"), (1940.0, 103.0, 0.895))
    small = (BASE.replace(grad_accumulation=2, activation_checkpointing=True), (950.0, 80.0, 0.9))
    bad = (BASE.replace(batch_size=128, precision="bf16"), (2500.0, 120.0, 0.80))  # predicted infeasible
    chosen = choose([fast, faster_copy, small, bad], [BASE_FIG], 2, feasible, lambda c: True)
    assert {c.key() for c in chosen} == {fast[0].key(), small[0].key()}  # not the near-copy of the fast one
    assert choose([fast, small], [BASE_FIG], 5, feasible, lambda c: c != fast[0]) == [small[0]]
    assert choose([], [BASE_FIG], 3, feasible, lambda c: True) == []


def test_the_whole_step_on_the_example_figures():
    chosen = combination_configs(BASE, BASE_FIG, MEASURED, Limits(0.01, None), 3, lambda c: True)
    assert 1 <= len(chosen) <= 3 and len({c.key() for c in chosen}) == len(chosen)
    assert all(sum(c.to_dict()[k] != v for k, v in BASE.to_dict().items()) >= 2 for c in chosen)
    capped = combination_configs(BASE, BASE_FIG, MEASURED, Limits(0.01, 95.0), 3, lambda c: True)
    assert capped and all(c.grad_accumulation == 2 for c in capped)  # only memory savers fit the cap


def test_hypervolume_of_a_corner_point():
    assert hypervolume([(0.0, 0.0, 0.0)]) == pytest.approx(REF**3)
    assert hypervolume([(1.2, 0.0, 0.0)]) == 0.0 and math.isclose(hypervolume([]), 0.0)


@pytest.mark.ray
def test_a_default_study_runs_the_combinations_after_the_seeds_then_the_model(ray_session, workdir):
    """Real trials: the baseline, the one-knob seeds, then combinations of the seeds'
    knobs (each changing two or more knobs, each once), then the model of effects. Two of the seeds
    save memory by far more than the noise whatever the machine's speed (half the batch,
    two micro-batches: about 0.65x each), and no metric limit makes a move lossy: whether
    a combination follows never hangs on a timing (with the quick space it did: on some
    machines only bf16 paid off, and one move has nothing to combine with). Seven trials: the
    baseline, the three seeds, two combinations (two moves at least give one), and then the
    model of the knobs' effects proposes. Batch size 16 is in the space and in no seed or
    combination, so the model has a candidate it expects to gain from (memory, by the batch
    size's rule) whatever was measured: with 64 and 32 alone, a run whose three seeds all
    paid off left only configurations the model expected nothing of, and the sampler's
    repeats filled the study."""
    space = workdir / "moves.yaml"
    space.write_text("batch_size: {choices: [64, 32, 16]}\ngrad_accumulation: {choices: [1, 2]}\n"
                     "channels_last: {choices: [false, true]}\n")
    assert main(["tune", str(EXAMPLES / "digits_cnn.py"), "--space", str(space), "--trials", "7", "--no-tui",
                 "--train-samples", "256", "--seed", "3", "--max-metric-drop", "1"]) == 0
    stored = sorted(optuna.load_study(study_name="digits_cnn-moves", storage="sqlite:///advisor.db").trials,
                    key=lambda t: t.number)
    # a sampler's repeat of a measured configuration is stored as a duplicate (no config of its own): the
    # space has 12 configurations, and on some machines TPE's turn proposes one already measured
    trials = [t for t in stored if "duplicate_of" not in t.user_attrs]
    assert all("config" in t.user_attrs for t in trials)
    base = TrialConfig.from_dict(trials[0].user_attrs["config"]).to_dict()
    model = [t for t in trials if t.user_attrs.get("model_proposal")]
    seeds = [t for t in trials if "seed_config" in t.user_attrs and not t.user_attrs.get("combination")
             and t not in model]
    combos = [t for t in trials if t.user_attrs.get("combination")]
    assert combos, "the seeds of this study have moves to combine"
    assert max(t.number for t in seeds) < min(t.number for t in combos)  # after every seed
    # then the model of the knobs' effects proposes (advisor/search/effects.py), something new
    assert model and min(t.number for t in model) > max(t.number for t in combos)
    measured = {TrialConfig.from_dict(t.user_attrs["config"]).key() for t in trials if t not in model}
    assert all(TrialConfig.from_dict(t.user_attrs["config"]).key() not in measured for t in model)
    seed_knobs = {k for t in seeds for k, v in TrialConfig.from_dict(t.user_attrs["config"]).to_dict().items()
                  if base[k] != v}
    for t in combos:
        changed = {k for k, v in TrialConfig.from_dict(t.user_attrs["config"]).to_dict().items() if base[k] != v}
        assert len(changed) >= 2 and changed <= seed_knobs
    keys = [TrialConfig.from_dict(t.user_attrs["config"]).key() for t in combos]
    assert len(set(keys)) == len(keys)


def test_a_move_counts_only_beyond_the_measured_probe_noise():
    """bf16 alone at 1.08x: a move against the 5% default, noise against a study whose
    baseline probes spread 10% (margins measured from them)."""
    from advisor.core.config import TrialConfig as Config
    from advisor.core.objectives import Figures as F
    from advisor.search.combine import MARGIN, moves

    base = Config(batch_size=32)
    measured = [(base.replace(precision="bf16"), F(1080.0, 100.0, 0.9))]
    assert [m.knob for m in moves(base, F(1000.0, 100.0, 0.9), measured, 0.01)] == ["precision"]
    assert moves(base, F(1000.0, 100.0, 0.9), measured, 0.01, margins=(0.10, 0.02)) == []
    assert MARGIN == 0.05
