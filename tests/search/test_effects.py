"""The model of the knobs' effects (advisor/search/effects.py): what it learns from known
effects, how its uncertainty behaves, the metric rule, and the real Strategy and Ledger on
a real Optuna study (in memory) driven by a simulated machine whose true effects are known (no
timing noise of this machine: the figures are computed, with a seeded noise of their own)."""

from __future__ import annotations

import math
import random
import statistics
import sys

import optuna
import pytest

from advisor.core.objectives import Figures, Limits, dominates
from advisor.search.effects import MAIN_SD, PAIR_SD, EffectsModel, _MetricRule, propose
from advisor.search.one_knob import neighbours
from advisor.search.strategy import MODEL_EVERY

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from search_simulated import BASE, KNOBS, SPACE, reached, simulated_study, truth  # noqa: E402


# ---- the model --------------------------------------------------------------------------
def test_the_model_learns_each_effect_and_an_interaction_from_the_combinations_measured():
    bf16, cl = BASE.replace(precision="bf16"), BASE.replace(channels_last=True)
    both = BASE.replace(precision="bf16", channels_last=True)
    measured = [(BASE, 1.0, 1.0), (bf16, 1.6, 0.7), (cl, 1.2, 1.0)]
    alone = EffectsModel(BASE, KNOBS, measured, (0.01, 0.01))
    p = alone.predict(both)  # never measured together: the effects add on a log scale, the interaction unknown
    assert p.log_speed == pytest.approx(math.log(1.6 * 1.2), abs=0.01)
    assert p.log_memory == pytest.approx(math.log(0.7), abs=0.01)
    assert p.speed_sd == pytest.approx(PAIR_SD, rel=0.1)  # the interaction's prior spread: both effects are known
    learnt = EffectsModel(BASE, KNOBS, [*measured, (both, 1.6 * 1.2 * 1.3, 0.7)], (0.01, 0.01))
    p = learnt.predict(both)
    assert p.log_speed == pytest.approx(math.log(1.6 * 1.2 * 1.3), abs=0.02) and p.speed_sd < 0.02
    # the interaction now carries over to a configuration with both and a third change
    third = both.replace(grad_accumulation=2)
    assert learnt.predict(third).log_speed == pytest.approx(math.log(1.6 * 1.2 * 1.3), abs=0.05)


def test_a_change_never_measured_keeps_its_prior_and_the_whole_of_its_uncertainty():
    model = EffectsModel(BASE, KNOBS, [(BASE, 1.0, 1.0), (BASE.replace(precision="bf16"), 1.6, 0.7)], (0.01, 0.01))
    p = model.predict(BASE.replace(batch_size=128))
    assert p.log_speed == pytest.approx(0.0) and p.log_memory == pytest.approx(0.5 * math.log(2))  # the batch rule
    assert p.speed_sd == pytest.approx(MAIN_SD) and p.memory_sd == pytest.approx(MAIN_SD)
    p = model.predict(BASE.replace(grad_accumulation=2))
    assert p.log_memory == pytest.approx(-0.5 * math.log(2))  # a smaller micro-batch
    assert model.predict(BASE).speed_sd == pytest.approx(0.0, abs=1e-6)  # the baseline: no change at all


def test_noise_keeps_the_model_from_believing_one_measurement_exactly():
    measured = [(BASE, 1.0, 1.0), (BASE.replace(precision="bf16"), 1.6, 0.7)]
    quiet = EffectsModel(BASE, KNOBS, measured, (0.01, 0.01)).predict(BASE.replace(precision="bf16"))
    noisy = EffectsModel(BASE, KNOBS, measured, (0.3, 0.3)).predict(BASE.replace(precision="bf16"))
    assert quiet.log_speed == pytest.approx(math.log(1.6), abs=0.01)
    assert 0 < noisy.log_speed < 0.8 * math.log(1.6) and noisy.speed_sd > 5 * quiet.speed_sd  # shrunk to the prior


def test_the_metric_rule_rules_out_lossy_changes_unless_something_compensated():
    big, acc = BASE.replace(batch_size=256), BASE.replace(grad_accumulation=2)
    measured = [(big, Figures(1500, 150, 0.85), True), (acc, Figures(900, 60, 0.898), True),
                (BASE.replace(pruning="l1_unstructured"), Figures(950, 100, 0.87), True),
                (BASE.replace(precision="bf16"), Figures(1600, 70, 0.5), False)]  # probed only: no verdict
    rule = _MetricRule(BASE, KNOBS, 0.90, 0.01, measured)
    assert rule.score(big.replace(precision="bf16")) is None  # the larger batch lost it everywhere
    assert rule.score(acc.replace(precision="bf16")) == pytest.approx(0.898)  # the worst measured change
    assert rule.score(BASE.replace(channels_last=True)) == pytest.approx(0.90)  # unknown: held
    compensated = [*measured, (big.replace(grad_accumulation=2), Figures(1400, 90, 0.9), True)]
    assert _MetricRule(BASE, KNOBS, 0.90, 0.01, compensated).score(big.replace(grad_accumulation=2,
                                                                               channels_last=True)) is not None


def test_propose_adds_to_the_front_and_respects_what_is_allowed_and_the_memory_cap():
    measured = [(c, truth(c), True) for c in neighbours(SPACE, BASE)]  # every change alone
    args = dict(space=SPACE, base=BASE, base_figures=truth(BASE), measured=measured, running=[],
                noise_sd=(0.02, 0.02), rng=random.Random(0), neighbours=lambda c: neighbours(SPACE, c))
    seen = {BASE.key(), *(c.key() for c, _, _ in measured)}
    first = propose(**args, limits=Limits(0.01), allowed=lambda c: c.key() not in seen)
    assert first is not None and first.key() not in seen
    assert sum(a != b for a, b in zip(first.to_dict().values(), BASE.to_dict().values())) >= 2  # a combination
    assert not any(dominates(f, truth(first)) for _, f, _ in [*measured, (BASE, truth(BASE), True)])  # new front
    capped = propose(**args, limits=Limits(0.01, memory_cap=40.0), allowed=lambda c: c.key() not in seen)
    assert capped is not None and truth(capped).peak_memory_bytes <= 40  # two memory savers together
    assert propose(**args, limits=Limits(0.01), allowed=lambda c: False) is None


# ---- the real Strategy and Ledger on the simulated machine (benchmarks/search_simulated.py) ---------
def test_a_simulated_study_finds_the_true_front_sooner_with_the_model():
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    ours = [simulated_study("default", seed) for seed in range(2)]
    random_ = [simulated_study("random", seed) for seed in range(2)]
    for trials in ours:
        model = [t for t in trials if t.user_attrs.get("model_proposal")]
        first = min(t.number for t in model)
        assert all(t.number < first for t in trials if t.user_attrs.get("combination"))  # after the combinations
        after = [t for t in trials if t.number >= first]
        assert len(model) >= (MODEL_EVERY - 1) * len(after) // MODEL_EVERY - 1  # the sampler has its share
        assert len(model) < len(after)
    assert min(reached(t)[-1] for t in ours) >= 0.93
    assert statistics.median(reached(t)[-1] for t in ours) >= statistics.median(reached(t)[-1] for t in random_) + 0.15


def test_a_long_study_fits_the_one_knob_trials_the_front_and_the_latest_and_grows_from_a_few_parents():
    from advisor.search.effects import MAX_FIT, MAX_PARENTS, _fitted, _parents

    singles = [(c, truth(c), True) for c in neighbours(SPACE, BASE)]
    others = [(c, truth(c), True) for c in SPACE.configs() if sum(a != b for a, b in zip(
        c.to_dict().values(), BASE.to_dict().values())) >= 2]
    measured = (singles + others) * 2  # 240 measurements (each configuration twice)
    front = [(c, f) for c, f, _ in others[:3]]
    fitted = _fitted(measured, front, BASE, KNOBS)
    assert len(fitted) == MAX_FIT
    keys = [c.key() for c, _ in fitted]
    assert {c.key() for c, _, _ in singles} <= set(keys) and {c.key() for c, _ in front} <= set(keys)
    assert measured[-1][0].key() in keys  # the latest
    assert _fitted(measured[:20], front, BASE, KNOBS) == [(c, f) for c, f, _ in measured[:20]]
    wide = [(c, truth(c)) for c in SPACE.configs()]
    parents = _parents(wide)
    assert len(parents) == MAX_PARENTS - 1
    fastest = max(wide, key=lambda r: r[1].throughput)[0]
    smallest = min(wide, key=lambda r: r[1].peak_memory_bytes)[0]
    assert parents[0] == fastest and parents[1] == smallest


def test_a_candidate_never_keeps_a_knob_that_its_change_switched_off():
    """A parent with compile and a compile mode, compile turned off: the mode must go back
    to its default, as the study would run it, not count as a change that never runs."""
    from advisor.search.space import parse_space

    space = parse_space({"compile": {"choices": [False, True]},
                         "compile_mode": {"choices": ["default", "reduce-overhead"], "when": {"compile": True}},
                         "batch_size": {"choices": [64, 128]}}, "t", "t")
    fast = BASE.replace(compile=True, compile_mode="reduce-overhead")
    assert space.as_sampled(fast.replace(compile=False)) == BASE
    measured = [(c, Figures(1300.0 if c.compile else 1100.0, 160.0 if c.batch_size == 128 else 100.0, 0.9), True)
                for c in (BASE.replace(compile=True), fast, BASE.replace(batch_size=128))]
    every = {c.key() for c in space.configs()}
    got = propose(space, BASE, Figures(1000.0, 100.0, 0.9), measured, [], Limits(0.01), (0.02, 0.02),
                  lambda c: c.key() not in every, random.Random(0), lambda c: neighbours(space, c, device="cuda"))
    assert got is None  # every real configuration is seen: nothing phantom is left to propose


def test_figures_of_zero_are_left_out_and_a_zero_baseline_proposes_nothing():
    measured = [(c, truth(c), True) for c in neighbours(SPACE, BASE)]
    measured.append((BASE.replace(precision="bf16", channels_last=True), Figures(1500.0, 0.0, 0.9), True))
    args = dict(space=SPACE, base=BASE, measured=measured, running=[], limits=Limits(0.01), noise_sd=(0.02, 0.02),
                allowed=lambda c: True, rng=random.Random(0), neighbours=lambda c: neighbours(SPACE, c))
    assert propose(base_figures=truth(BASE), **args) is not None
    assert propose(base_figures=Figures(1000.0, 0.0, 0.9), **args) is None


def test_a_model_proposal_cut_short_runs_again():
    """A model proposal cut short (another process held the GPU: not counted) may run again;
    it must not be skipped as already queued and handed to the sampler instead."""
    from advisor.core.config import TrialConfig
    from advisor.core.results import TrialResult
    from advisor.search.strategy import Strategy
    from advisor.study.run._ledger import Ledger

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(directions=["maximize", "minimize", "maximize"],
                                sampler=optuna.samplers.TPESampler(seed=0))
    ledger = Ledger(study, Strategy(SPACE, BASE, workload="train", sampler="default", budget=20,
                                    limits=Limits(0.01)), Limits(0.01))

    def run(c):
        f = truth(c)
        return TrialResult(ok=True, throughput=f.throughput, peak_memory_bytes=int(f.peak_memory_bytes * 1e6),
                           score=f.score, step_time_median_s=0.01)

    first = ledger.propose_baseline()
    ledger.tell(first.number, run(first.config), 1.0)
    busy = None
    for _ in range(19):
        p = ledger.propose()
        if busy is None and study.trials[p.number].user_attrs.get("model_proposal"):
            busy = p.config.key()
            ledger.tell(p.number, TrialResult.failed("device_busy", "held by pid 4242: not measured"), 1.0)
        else:
            ledger.tell(p.number, run(p.config), 1.0)
    configs = [TrialConfig.from_dict(t.user_attrs["config"]).key() for t in study.trials if "config" in t.user_attrs]
    assert busy is not None and configs.count(busy) == 2
