"""advisor/core/interference.py: which timed blocks other work disturbed, from synthetic
counters (known truth, no machine noise)."""

from __future__ import annotations

import math

import pytest

from advisor.core.interference import (
    CEILING,
    FLOOR,
    MIN_SCORES,
    InterferencePool,
    Z,
    busy,
    disturbance,
    disturbed_blocks,
    limit_of,
    overlapping,
    rerun_reason,
    score,
    too_few_clean,
)


def block(wait_share: float = 0.0, steal_share: float = 0.0) -> dict[str, float]:
    """Counters of one block whose threads waited ``wait_share`` of their runnable time."""
    run = 0.1
    return {"run_s": run, "wait_s": run * wait_share / (1 - wait_share), "steal_s": steal_share, "cpus_s": 1.0,
            "nivcsw": 3.0, "cpu_s": 0.1, "threads": 3.0}


def test_score_is_the_wait_share_plus_the_steal_share():
    assert score(block(0.25)) == pytest.approx(0.25)
    assert score(block(0.25, 0.1)) == pytest.approx(0.35)
    assert score({"steal_s": 0.02, "cpus_s": 0.2}) == pytest.approx(0.1)  # no schedstat: steal alone
    assert score({}) is None and score({"run_s": 0.0, "wait_s": 0.0}) is None  # nothing read: no score


def test_the_limit_comes_from_the_spread_never_below_the_floor():
    assert limit_of([0.01] * (MIN_SCORES - 1)) is None  # too few to judge
    assert limit_of([0.01, 0.012, 0.014] * 4) == FLOOR  # a quiet machine: MAD tiny, the floor decides
    busy = [0.15, 0.2, 0.25] * 4  # a shared machine's usual wait: median 0.2, MAD 0.05
    assert limit_of(busy) == pytest.approx(0.2 + Z * 0.05 / 0.6745)
    assert limit_of(busy + [None] * 5) == limit_of(busy)


def test_only_slower_blocks_over_the_limit_are_dropped():
    steps = [0.010] * 10 + [0.015, 0.014, 0.008]
    scores: list[float | None] = [0.01] * 10 + [0.4, 0.3, 0.4]  # the last one busy, yet faster
    assert disturbed_blocks(steps, scores, 0.1) == [10, 11]
    assert disturbed_blocks(steps, scores, None) == []  # no limit, no verdict
    assert disturbed_blocks([0.02, 0.021], [0.4, 0.5], 0.1) == [0, 1]  # all busy: none to compare with
    assert disturbed_blocks([0.02, 0.021], [None, None], 0.1) == []  # no counters: all clean


def test_a_trial_timed_on_a_busy_machine_is_known_as_such_whatever_the_studys_spread():
    """A study that has only ever seen a busy machine: its spread sets a limit over 1, so no
    block is an outlier of it; the trial's median block score over CEILING still says its
    speed was taken on a busy machine (not for a trial whose own ranks wait for the CPUs)."""
    def t(scores, contended=False):
        return {"interference": {"blocks": len(scores), "clean": len(scores), "scores": scores,
                                 "self_contended": contended}}
    assert limit_of([0.48, 0.5, 0.52] * 4) > 0.5
    assert busy(t([0.49, 0.5, 0.48, 0.51])) and not busy(t([0.49, 0.5, 0.48, 0.51], contended=True))
    assert not busy(t([0.01, 0.5, 0.02, 0.01]))  # one burst: the blocks' own business (dropped or not)
    assert not busy(t([CEILING] * 4)) and not busy({}) and not busy(None)


def test_a_trial_runs_again_only_when_too_few_clean_blocks_remain():
    assert not too_few_clean(20, 10) and too_few_clean(20, 9) and too_few_clean(4, 2) and not too_few_clean(0, 0)
    assert not too_few_clean(2, 2)  # a slow trial's time cap left two blocks, none dropped: it stands
    summary = {"blocks": 20, "clean": 4, "dropped": 16, "too_few_clean": True, "limit": 0.12, "limit_from": "study",
               "scores": [0.4] * 16 + [0.02] * 4}
    why = rerun_reason({"interference": summary})
    assert why and "16 of its 20 timed blocks" in why and "12%" in why and "study" in why
    assert rerun_reason({"interference": summary | {"too_few_clean": False}}) is None
    assert "by the trial's spread" in rerun_reason({"interference": summary | {"limit": None, "limit_from": "trial"}})
    assert rerun_reason({}) is None and rerun_reason(None) is None


def test_the_cleanest_run_drops_fewest_blocks_then_waits_least():
    def t(clean: int, scores: list[float]) -> dict:
        return {"interference": {"blocks": 10, "clean": clean, "scores": scores}}
    assert disturbance(t(8, [0.1])) < disturbance(t(4, [0.0]))
    assert disturbance(t(4, [0.1, 0.2, 0.3])) < disturbance(t(4, [0.3, 0.3, 0.3]))
    assert disturbance({}) == (math.inf, math.inf)


def test_the_pool_keeps_the_studys_recent_scores():
    pool = InterferencePool([{"interference": {"blocks": 3, "clean": 3, "scores": [0.01, 0.02, None]}}, None, {}])
    assert list(pool.scores) == [0.01, 0.02] and pool.limit is None
    for _ in range(4):
        pool.add({"interference": {"blocks": 3, "clean": 3, "scores": [0.15, 0.2, 0.25]}})
    assert pool.limit == pytest.approx(limit_of(list(pool.scores)))


def test_a_configuration_that_waits_in_every_block_alike_drops_nothing():
    """Two DDP ranks on one core wait for a CPU in every block (their own threads): over the
    study's limit, but not over the trial's own spread, so nothing is dropped; a burst on top
    of that steady wait still is."""
    steps = [0.020 + 0.0001 * (i % 3) for i in range(12)]
    steady: list[float | None] = [0.45, 0.5, 0.48] * 4
    assert disturbed_blocks(steps, steady, 0.1, self_contended=True) == []
    burst = steady[:11] + [0.97]
    assert disturbed_blocks(steps[:11] + [0.05], burst, 0.1, self_contended=True) == [11]
    assert len(disturbed_blocks(steps, steady, 0.1)) == 12  # not self-contended: a neighbour all along


def test_a_block_another_rank_found_disturbed_is_dropped_where_it_was_slower():
    """A neighbour that took rank 1's CPU held rank 0 in its collectives: rank 0's counters
    show nothing, but its blocks that overlap rank 1's disturbed ones are dropped, if slower."""
    steps = [0.010] * 10 + [0.018, 0.017] + [0.010] * 6 + [0.009]
    quiet: list[float | None] = [0.01] * len(steps)
    assert disturbed_blocks(steps, quiet, 0.1) == []
    assert disturbed_blocks(steps, quiet, 0.1, elsewhere={10, 11, 18}) == [10, 11]  # 18 ran faster: kept
    assert disturbed_blocks(steps, quiet, None, elsewhere={10}) == [10]  # no limit yet: the other rank decides
    assert disturbed_blocks(steps, [None] * len(steps), None) == []


def test_blocks_overlapping_another_ranks_disturbed_windows():
    windows = [(0.0, 1.0), (1.0, 2.0), None, (2.0, 3.0), (3.0, 4.0)]
    assert overlapping(windows, [(1.5, 2.5)]) == [1, 3]
    assert overlapping(windows, [(1.0, 1.0)]) == []  # touching is not overlapping
    assert overlapping(windows, [[3.9, 9.0], (0.5, 0.6)]) == [0, 4]  # as JSON brings them: lists
    assert overlapping(windows, []) == []
