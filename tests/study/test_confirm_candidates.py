"""Which configurations paired confirmation confirms (advisor/study/confirmation/confirm.py
``candidates``): the picks, and the rest of the front only where it could still be picked
(within the noise of a pick on that pick's own objective). Stored figures chosen for the
case; the pairing itself runs in tests/study/test_confirm.py."""

from __future__ import annotations

from advisor.core.config import TrialConfig
from advisor.core.objectives import Figures
from advisor.core.pairs import Confirmation, Pair
from advisor.core.picks import PICKS, pick
from advisor.core.stored import StoredStudy, TrialRecord
from advisor.core.study_attrs import CONFIRMATION
from advisor.study.confirmation.confirm import candidates, near_front


def record(number: int, thr: float, mem: float, acc: float, **config) -> TrialRecord:
    return TrialRecord(number, "complete", TrialConfig.from_dict({"batch_size": 32, **config}),
                       Figures(thr, mem, acc), {"accuracy_drop": -0.01}, baseline=number == 0,
                       finished_at=float(number))


def test_only_what_could_still_be_picked_is_confirmed():
    records = [record(0, 1000, 100, 0.95),
               record(1, 2000, 100, 0.95, precision="bf16"),  # the fastest
               record(2, 1900, 95, 0.95, channels_last=True),  # within 30% of the fastest: could be picked
               record(3, 1200, 50, 0.95, grad_accumulation=2),  # the smallest
               record(4, 1500, 70, 0.95, threads=1),  # on the front, but no pick is within its reach
               record(5, 1100, 90, 0.96, compile=True),  # the most accurate
               record(6, 1300, 60, 0.95, num_workers=2)]  # on the front, beyond every pick's noise
    # a GPU's allocator peaks: single memory readings are not widened (a CPU's resident ones are, +-16%,
    # and then 50 against 60 ties: test_a_cpu_memory_reading_within_the_resident_noise_ties)
    study = StoredStudy("s", {"settings": {"device": "cuda"}}, records)
    assert {r.number for r in study.front()} >= {1, 2, 3, 4, 5, 6}
    picked = {pick(study, how).number for how in PICKS}
    chosen = [r.number for r in candidates(study, top=6)]
    assert picked == {1, 3, 4, 5}  # 4: the balanced pick
    assert set(chosen) == picked | {2} and 6 not in chosen
    assert chosen[: len(picked - {0})] == [n for n in dict.fromkeys(pick(study, h).number for h in PICKS) if n != 0]
    assert candidates(study, top=2) == candidates(study, top=6)[:2]


def test_a_trial_off_the_front_within_the_probe_noise_is_confirmed_too():
    """trust.py's study B: bf16 alone read 1.02x beside a combination at 1.06x with less
    memory, was never confirmed, and the picks went to the combination; the same command's
    other run confirmed bf16 at 1.38x. No baseline re-measurements here: the default probe
    margins (30% throughput, 10% memory) apply."""
    records = [record(0, 1000, 100, 0.95),
               record(1, 1020, 100, 0.95, precision="bf16"),  # off the front by 4%: within the noise
               record(2, 1060, 80, 0.95, precision="bf16", grad_accumulation=2),  # the front's fastest
               record(3, 700, 60, 0.95, precision="bf16", grad_accumulation=4),  # the smallest
               record(4, 600, 100, 0.95, threads=1)]  # beaten beyond the noise by trial 2 on both
    study = StoredStudy("s", {}, records)
    front = {r.number for r in study.front()}
    assert 1 not in front and 4 not in front and {2, 3} <= front
    assert [r.number for r in near_front(study)] == [r.number for r in study.front()] + [1]
    chosen = [r.number for r in candidates(study, top=6)]
    assert 1 in chosen and 4 not in chosen
    assert chosen.index(1) > chosen.index(2)  # the picks first

    # once confirmed, its confirmed figures decide: behind the front, it is not brought back
    slow = Confirmation(1, [Pair(0.5, 1000.0, 900.0, 100.0, 100.0)] * 5)
    confirmed = StoredStudy("s", {f"{CONFIRMATION}1": slow.to_dict()}, records)
    assert 1 not in {r.number for r in near_front(confirmed)}
    assert 1 not in [r.number for r in candidates(confirmed, top=6)]
