"""The search decides on the baseline measured around each figure, not on trial 0's one
probe: the combination step waits, once, for the baseline to be measured again after the
one-knob seeds (``Strategy.reference_due``, which ``advisor tune``'s driver answers), and
each seed is rescaled to the measurements nearest it in time, later ones included
(``StoredStudy.decision_reference``, ``advisor.core.noise.nearest_reference``). The real
Strategy and Ledger on an in-memory Optuna study; the machine is simulated (known figures,
none of this machine's timing). The case is benchmarks/trust.py's study B: trial 0's probe
read fast, and every seed read ~15% low against it."""

from __future__ import annotations

import sys
import time

import optuna
import pytest

from advisor.core.config import TrialConfig
from advisor.core.noise import nearest_reference
from advisor.core.objectives import Limits
from advisor.core.results import TrialResult
from advisor.core.stored import read_study
from advisor.core.study_attrs import StudyAttrs
from advisor.search.strategy import Strategy
from advisor.study.run._ledger import Ledger

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from search_simulated import BASE, SPACE  # noqa: E402

SLOW = 0.85  # the machine after trial 0, against trial 0's probe


def run(c: TrialConfig, first: bool = False) -> TrialResult:
    speed, memory = 1000.0 * (1.0 if first else SLOW), 100.0
    if c.precision == "bf16":
        speed *= 1.18  # 1.003x against trial 0's probe: within the 5% margin (its memory alike: no move there)
    if c.channels_last:
        speed *= 1.25
    return TrialResult(ok=True, throughput=speed, peak_memory_bytes=int(memory * 1e6), score=0.9,
                       step_time_median_s=0.01)


def through_the_seeds(remeasures: bool = True) -> tuple[Ledger, optuna.Study]:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(directions=["maximize", "minimize", "maximize"],
                                sampler=optuna.samplers.TPESampler(seed=0))
    strategy = Strategy(SPACE, BASE, workload="train", sampler="default", budget=20, limits=Limits(0.01),
                        remeasures=remeasures)
    ledger = Ledger(study, strategy, Limits(0.01))
    first = ledger.propose_baseline()
    ledger.tell(first.number, run(first.config, first=True), 1.0)
    for _ in range(5):  # the one-knob seeds
        p = ledger.propose()
        assert p is not None and len(p.config.changed(BASE)) == 1
        ledger.tell(p.number, run(p.config), 1.0)
    return ledger, study


def combination(study: optuna.Study, number: int) -> set[str] | None:
    trial = study.trials[number]
    return set(TrialConfig.from_dict(trial.user_attrs["config"]).changed(BASE)) if trial.user_attrs.get(
        "combination") else None


def test_the_combination_step_waits_for_the_baseline_measured_again_and_decides_on_it():
    ledger, study = through_the_seeds()
    assert ledger.propose() is None and ledger.strategy.reference_due  # the driver measures the baseline now
    time.sleep(0.01)
    StudyAttrs(study).add_baseline_measurement({"at": time.time(), "throughput": 1000.0 * SLOW,
                                                "peak_memory_bytes": 100e6, "reason": "the seeds are in"})
    assert read_study(study).measured_after_trials
    p = ledger.propose()
    assert p is not None and not ledger.strategy.reference_due
    # bf16 reads 1.09x against the median of the two measurements around it (1.003x against
    # trial 0's alone): a move now, combined with channels_last
    assert combination(study, p.number) == {"precision", "channels_last"}
    stored = read_study(study)
    bf16 = next(r for r in stored.records if r.config is not None and r.config.changed(BASE) == {"precision": "bf16"})
    assert stored.decision_reference(bf16) == pytest.approx(1000.0 * (1 + SLOW) / 2)
    assert stored.reference_throughput(bf16) == pytest.approx(1000.0)  # what is shown: trial 0's, as printed then


def test_without_a_measurement_the_search_goes_on_with_trial_0s_probe_and_bf16_is_no_move():
    ledger, study = through_the_seeds()
    assert ledger.propose() is None and ledger.strategy.reference_due
    p = ledger.propose()  # the driver had none to take (the deadline, say): it waits once only
    assert p is not None and not ledger.strategy.reference_due
    assert combination(study, p.number) is None  # channels_last alone paid off: nothing to combine
    # a driver that never measures the baseline again (a simulation) is not asked to
    ledger, study = through_the_seeds(remeasures=False)
    assert ledger.propose() is not None and not ledger.strategy.reference_due


def test_the_nearest_measurements_in_time_either_side():
    measured = [(0.0, 1000.0), (10.0, 850.0), (100.0, 900.0), (110.0, 910.0)]
    assert nearest_reference(measured, 5.0) == 900.0  # 1000, 850 and the next nearest, 900
    assert nearest_reference(measured, 105.0) == 900.0  # 900, 910 and 850
    assert nearest_reference(measured[:2], 5.0) == pytest.approx(925.0)
    assert nearest_reference([], 5.0) is None
