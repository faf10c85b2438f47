"""Rounds of paired runs on a scripted executor (no Ray, no trial processes): the order the
runs are asked for, a fresh baseline run for every round, the least disturbed run kept
when every retry is disturbed, the pairs' sitting, and the early word when the target is
out of reach. The real executor runs the same rounds in tests/study/test_confirm.py."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pytest

from advisor.core.config import TrialConfig
from advisor.core.events import Note
from advisor.core.noise import SentinelJudge
from advisor.core.pairs import Confirmation
from advisor.core.results import TrialResult, TrialSettings
from advisor.core.stop import Stop
from advisor.study.confirmation.pairing import Candidate, Rounds

from scripted import Handle, Workload


@dataclass
class Scripted:
    """An executor whose every probe answers at once: throughput from ``speed`` (by batch
    size, or a list popped per run), sentinel readings from ``sentinel`` (popped; 1 ms when
    empty). ``asked`` records the batch size of each run, in order."""

    speed: dict[int, list[float] | float]
    sentinel: list[float] = field(default_factory=list)
    asked: list[int] = field(default_factory=list)
    device: str = "cpu"
    slots: int = 1
    resources: dict = field(default_factory=dict)
    startup_s: float = 0.0

    def submit(self, number, payload):
        bs = payload.config.batch_size
        self.asked.append(bs)
        speed = self.speed[bs]
        throughput = speed.pop(0) if isinstance(speed, list) else speed
        reading = self.sentinel.pop(0) if self.sentinel else 0.001
        result = TrialResult(ok=True, throughput=throughput, peak_memory_bytes=1000 * bs,
                             telemetry={"sentinel": {"before_s": reading, "after_s": reading}})
        return Handle(number, time.monotonic(), result)

    def wait(self, handles, timeout):
        return [(h, h.result) for h in handles]

    def cancel(self, handle):
        pass

    def shutdown(self):
        pass


BASE = TrialConfig(batch_size=32)


def rounds(executor, target=0.03, max_pairs=2, judge=None, sitting=0):
    notes, paired = [], []
    r = Rounds(executor, Workload(), TrialSettings(train_samples=1), judge or SentinelJudge(threshold=1e9), target,
               max_pairs, 60, Stop(), lambda e: notes.append(e.text) if isinstance(e, Note) else None,
               lambda c, wall: paired.append(c.label), sitting=sitting)
    return r, notes, paired


def test_every_round_runs_its_own_baseline_and_reverses_the_candidates():
    executor = Scripted({32: 1000.0, 64: 1500.0, 128: 1200.0})
    candidates = [Candidate(f"c{bs}", BASE.replace(batch_size=bs), Confirmation(bs)) for bs in (64, 128)]
    r, _, paired = rounds(executor)
    r.run(BASE, candidates)
    assert executor.asked == [32, 64, 128, 32, 32, 128, 64, 32]  # A C1 C2 A | A C2 C1 A: no run shared
    assert paired == ["c64", "c128", "c128", "c64"]
    for c in candidates:
        assert len(c.confirmation.pairs) == 2 and c.confirmation.status == "capped"
        assert all(0 < p.position < 1 and p.sitting == 0 and not p.disturbed for p in c.confirmation.pairs)
    assert candidates[0].confirmation.throughput.center == pytest.approx(1.5)


def test_the_least_disturbed_try_is_kept_and_marked_when_every_try_is_disturbed():
    # the baseline's first run is clean; the candidate's three tries read 2x, 1.5x, 1.8x the median
    executor = Scripted({32: 1000.0, 64: [1100.0, 1500.0, 1200.0]}, sentinel=[0.001, 0.002, 0.0015, 0.0018])
    c = Candidate("c64", BASE.replace(batch_size=64), Confirmation(64))
    r, notes, _ = rounds(executor, max_pairs=1, judge=SentinelJudge([0.001] * 5))
    r.run(BASE, [c])
    assert executor.asked == [32, 64, 64, 64, 32]
    (pair,) = c.confirmation.pairs
    assert pair.config_throughput == 1500.0  # the 1.5x try, not the last (1.8x) one
    assert "the configuration: the noise sentinel read 1.5 ms" in pair.disturbed
    assert sum("running it again" in n for n in notes) == 2
    assert any("keeping the least disturbed one (1.50x off" in n for n in notes)
    again = Confirmation.from_dict(c.confirmation.to_dict())
    assert again.pairs[0].disturbed == pair.disturbed


def test_a_clean_retry_replaces_a_disturbed_run():
    executor = Scripted({32: 1000.0, 64: [1100.0, 1500.0]}, sentinel=[0.001, 0.002, 0.001])
    c = Candidate("c64", BASE.replace(batch_size=64), Confirmation(64))
    r, notes, _ = rounds(executor, max_pairs=1, judge=SentinelJudge([0.001] * 5))
    r.run(BASE, [c])
    (pair,) = c.confirmation.pairs
    assert pair.config_throughput == 1500.0 and pair.disturbed == ""


def test_pairs_carry_their_sitting_and_the_out_of_reach_word_comes_once_after_the_first_stage():
    noisy = [1300.0, 1700.0, 1400.0, 1600.0, 1500.0, 1450.0, 1550.0, 1500.0]
    executor = Scripted({32: 1000.0, 64: list(noisy)})
    c = Candidate("c64", BASE.replace(batch_size=64), Confirmation(64))
    r, notes, _ = rounds(executor, max_pairs=8, sitting=3)
    r.run(BASE, [c])
    assert len(c.confirmation.pairs) == 8 and {p.sitting for p in c.confirmation.pairs} == {3}
    assert c.confirmation.status == "capped"  # pairing went on to the cap
    reach = [n for n in notes if "out of reach" in n]
    assert len(reach) == 1 and reach[0].startswith("pairing c64: throughput's +-3.0% is out of reach")
    assert executor.asked.count(64) == 8


def test_a_pair_far_off_the_others_is_kept_marked_and_left_out_of_the_figures():
    """A review's pair read 0.15x among 0.57-0.72x with its sentinel at its median: one run
    disturbed beyond what the readings showed. Kept in the stored pairs, marked, and left
    out of the figures (so the pairing goes on for the pairs it needs: the cap of 5 counts the
    pairs the figures count, so a sixth is run)."""
    executor = Scripted({32: 1000.0, 64: [650.0, 640.0, 660.0, 150.0, 655.0, 645.0]})
    c = Candidate("c64", BASE.replace(batch_size=64), Confirmation(64))
    r, notes, _ = rounds(executor, max_pairs=5)
    r.run(BASE, [c])
    pairs = c.confirmation.pairs
    assert len(pairs) == 6 and [bool(p.disturbed) for p in pairs] == [False, False, False, True, False, False]
    assert pairs[3].disturbed.startswith("far off its other pairs: its throughput ratio 0.15x is 4.3x off the "
                                         "median 0.65x of its 3 other pairs")
    assert c.confirmation.left_out == 1 and c.confirmation.throughput.n == 5
    assert c.confirmation.throughput.center == pytest.approx(0.65, abs=0.005)
    assert any(n.startswith("pairing c64: a pair left out of its figures: its throughput ratio 0.15x") for n in notes)
    assert c.confirmation.status in ("confirmed", "capped")  # on 5 counted pairs


def test_pairs_left_out_as_disturbed_stop_at_twice_the_cap():
    """A machine that disturbs every other pair cannot keep a confirmation going: the pairs
    the figures leave out count toward no cap, but all pairs stop at twice it."""
    from advisor.core.pairs import DISTURBED_ALLOWANCE, Pair

    c = Confirmation(1, [Pair(0.5, 1000.0, 1500.0, 1.0, 1.0, disturbed="busy" if i % 2 else "") for i in range(5)])
    c.settle(0.0001, 3)
    assert len(c.counted) == 3 and c.status == "capped"
    busy = Confirmation(1, [Pair(0.5, 1000.0, 1500.0, 1.0, 1.0, disturbed="busy") for _ in range(3)])
    busy.settle(0.0001, 3)  # every pair disturbed: all of them are counted (nothing cleaner), so the cap holds
    assert busy.status == "capped"
    mixed = Confirmation(1, [Pair(0.5, 1000.0, 1500.0, 1.0, 1.0, disturbed="" if i == 0 else "busy")
                             for i in range(DISTURBED_ALLOWANCE * 3)])
    mixed.settle(0.0001, 3)
    assert len(mixed.counted) == 1 and mixed.status == "capped"
    mixed.pairs.pop()
    mixed.settle(0.0001, 3)
    assert mixed.status == "running"
