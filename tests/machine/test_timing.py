"""advisor/machine/timing.py: the step timer.

Correctness only: these tests check what the protocol reports, not how fast anything is.
"""

from __future__ import annotations

import math
import time

import pytest
import torch
from torch import nn

from advisor.machine.timing import StepTimer, Timing, median_iqr

MB = 1_000_000


# ---- median_iqr -----------------------------------------------------------------------

def test_median_iqr():
    assert median_iqr([]) == (0.0, 0.0)
    assert median_iqr([0.5]) == (0.5, 0.0)
    assert median_iqr([5.0, 1.0, 4.0, 2.0, 3.0]) == (3.0, 2.0)  # order does not matter
    median, iqr = median_iqr([1.0, 1.0, 1.0, 100.0])  # one outlier barely moves either
    assert median == 1.0 and iqr == pytest.approx(24.75)
    assert median_iqr([2.0, 4.0]) == (3.0, 1.0)


# ---- Timing ---------------------------------------------------------------------------

def test_timing_fields_and_dict():
    t = Timing(median_s=0.02, iqr_s=0.001, steps=40, timed_s=0.8, converged=True)
    assert t.rel_iqr == pytest.approx(0.05)
    assert t.to_dict() == {"median_s": 0.02, "iqr_s": 0.001, "steps": 40, "timed_s": 0.8,
                           "converged": True, "rel_iqr": pytest.approx(0.05), "low_s": 0.0, "high_s": 0.0,
                           "warmup_blocks": 0, "blocks": 0, "halfwidth": None, "tolerance": None}
    assert Timing(0.0, 0.0, 0, 0.0, False).rel_iqr == math.inf
    known = Timing(0.02, 0.001, 40, 0.8, True, low_s=0.019, high_s=0.021, warmup_blocks=2, blocks=12)
    assert known.halfwidth == pytest.approx(math.log(0.021 / 0.019) / 2)
    assert known.to_dict()["halfwidth"] == pytest.approx(0.05, abs=1e-3)


# ---- StepTimer ------------------------------------------------------------------------

def test_step_timer_on_a_real_training_step():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 64), torch.randint(0, 10, (64,))
    timer = StepTimer(min_steps=10, tolerance=0.05, max_seconds=2.0, block_s=0.01, min_blocks=5)
    mine: list[float] = []  # each step timed independently, inside the timer's region
    start = time.perf_counter()
    while not timer.done():
        with timer.step():
            t0 = time.perf_counter()
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            mine.append(time.perf_counter() - t0)
    wall = time.perf_counter() - start
    result = timer.result()
    assert isinstance(result, Timing)
    assert result.median_s > 0 and result.iqr_s >= 0
    assert result.steps == timer.steps >= 1
    assert result.converged == timer.converged()
    if result.converged:
        assert result.steps >= 10 and result.blocks >= 5
        assert result.halfwidth <= 0.05 and result.low_s <= result.median_s <= result.high_s
    else:  # capped: it ran its full time budget
        assert result.timed_s >= 2.0
    # Timed seconds are the steps' own time (not the loop's bookkeeping), and the median
    # is a per-step time that actually occurred (not a block's total).
    assert result.steps == len(mine)
    assert sum(mine) <= result.timed_s <= wall
    assert result.timed_s - sum(mine) < 0.25
    assert min(mine) <= result.median_s <= max(mine)
    assert wall < 2.0 + 2.0  # stopped at (about) the cap at the latest, even on a busy machine


def test_capped_stops_at_max_seconds():
    timer = StepTimer(min_steps=1, tolerance=-1.0, max_seconds=0.3, block_s=0.01, min_blocks=1)
    # tolerance < 0: the estimate can never settle, only the cap ends timing.
    start = time.perf_counter()
    while not timer.done():
        with timer.step():
            time.sleep(0.02)
    wall = time.perf_counter() - start
    assert timer.capped() and not timer.converged()
    result = timer.result()
    assert result.converged is False
    assert 0.3 <= result.timed_s < 0.3 + 0.3  # about one step over the cap at most
    assert wall < 1.5
    assert result.median_s == pytest.approx(0.02, rel=0.5)
    assert 2 <= result.steps <= 15  # 0.3 s of 0.02 s steps (fewer if sleeps overrun)


def test_short_steps_are_pooled_into_blocks_of_equal_count():
    """The first timed step sizes the blocks (ceil(0.1 / 0.03) = 4 steps); every block then
    has that many steps, so one slow step cannot become a sample of its own."""
    timer = StepTimer(block_s=0.1)
    for _ in range(3):
        timer.add(0.03)
    assert timer.samples == []  # 3 of 4 steps: the block is not full yet
    timer.add(0.03)
    assert timer.samples == [pytest.approx(0.03)]  # one block of 4 steps, per-step time
    for seconds in (0.5, 0.03, 0.03, 0.03):
        timer.add(seconds)
    assert timer.samples == [pytest.approx(0.03), pytest.approx(0.59 / 4)]
    assert timer.steps == 8 and timer.total_s == pytest.approx(0.71)


def test_converged_needs_enough_steps_blocks_and_a_settled_median():
    timer = StepTimer(min_steps=4, min_blocks=4, tolerance=0.05, block_s=0.0, max_seconds=100)
    for _ in range(3):
        timer.add(1.0)
    assert not timer.converged() and not timer.done()
    timer.add(1.0)
    assert timer.converged() and timer.done()
    noisy = StepTimer(min_steps=4, min_blocks=4, tolerance=0.05, block_s=0.0, max_seconds=100)
    for s in (1.0, 1.2, 0.9, 1.1, 1.0, 0.95):
        noisy.add(s)
    assert not noisy.converged()  # 6 blocks: their range, 0.9..1.2, is the interval (+-14%)
    assert not noisy.capped()
    for s in [1.0, 1.01, 0.99] * 10:  # more blocks: the interval narrows to inner order statistics
        noisy.add(s)
    assert noisy.converged() and noisy.result().halfwidth <= 0.05 and noisy.result().tolerance == 0.05
    steps = StepTimer(min_steps=10, min_blocks=2, tolerance=0.05, block_s=0.0, max_seconds=100)
    for _ in range(9):
        steps.add(1.0)
    assert not steps.converged()  # settled, but fewer than min_steps steps
    steps.add(1.0)
    assert steps.converged()


def test_the_warm_up_is_cut_as_it_shows_not_waited_out():
    """The first blocks of a compiled or cold model are slower; they are cut from the figure
    (MSER, advisor.core.settle) and the timing settles on the rest, without a fixed wait."""
    timer = StepTimer(min_steps=1, min_blocks=6, tolerance=0.03, block_s=0.0, max_seconds=100, counters=None)
    for s in (5.0, 3.0, 1.6, 1.2):  # a recompile, then a cache warming
        timer.add(s)
    steady = [1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.01]
    for s in steady:
        timer.add(s)
        if timer.done():
            break
    result = timer.result()
    assert result.converged and result.warmup_blocks == 4
    assert result.median_s == pytest.approx(1.0, rel=0.01) and result.low_s >= 0.98 and result.high_s <= 1.02
    assert result.blocks == len(timer.samples) - 4


def test_the_verdict_is_not_worked_out_again_between_the_steps_of_a_block(monkeypatch):
    """A block's steps run with its clock running: asking whether the timer is done between
    them must cost nothing, so the verdict is kept until a block ends."""
    import advisor.machine.timing as timing

    gpu = _VirtualGpu(host_s=0.001, device_s=0.0)
    monkeypatch.setattr(timing, "time", gpu)
    calls = []
    real = timing.settle
    monkeypatch.setattr(timing, "settle", lambda samples: calls.append(len(samples)) or real(samples))
    timer = StepTimer(min_steps=1, min_blocks=2, tolerance=-1.0, sync=gpu.sync, block_s=0.01, max_seconds=100,
                      counters=None)
    for _ in range(10 * 30):  # the first step sizes the blocks (10 steps each, itself the first)
        timer.done()
        with timer.step():
            gpu.step()
    assert len(timer.samples) == 30 and len(calls) <= 30


class _VirtualGpu:
    """A stand-in for an asynchronous device (none here), on a virtual clock: each step
    spends ``host_s`` on the host and queues ``device_s`` of work; ``sync`` waits for the
    queue. The timer reads the same clock."""

    def __init__(self, host_s, device_s):
        self.now, self.busy_until, self.host_s, self.device_s, self.syncs = 0.0, 0.0, host_s, device_s, 0

    def perf_counter(self):
        return self.now

    def step(self):
        self.now += self.host_s  # the host prepares and launches the step (and copies the next batch)
        self.busy_until = max(self.busy_until, self.now) + self.device_s

    def sync(self):
        self.syncs += 1
        self.now = max(self.now, self.busy_until)


def test_steps_overlap_inside_a_block(monkeypatch):
    """With a synchronisation per step the host's work (data loading, launching) never
    overlapped the device's: 1 ms + 2 ms measured as 3 ms a step. Synchronised per block,
    the host runs ahead as in real training and the step costs what the device costs."""
    import advisor.machine.timing as timing

    gpu = _VirtualGpu(host_s=0.001, device_s=0.002)
    monkeypatch.setattr(timing, "time", gpu)
    timer = StepTimer(min_steps=20, tolerance=0.02, max_seconds=10, sync=gpu.sync, block_s=0.05, min_blocks=5)
    while not timer.done():
        with timer.step():
            gpu.step()
    result = timer.result()
    assert result.median_s == pytest.approx(0.002, rel=0.05)
    assert gpu.syncs <= 2 * (len(timer.samples) + 2)  # per block, not per step
    assert timer.steps >= 5 * 17  # blocks of ceil(0.05 / 0.003) = 17 steps (the first step, alone, took 3 ms)


def test_discarded_steps_are_not_timed(monkeypatch):
    """Steps timed since the last synchronisation are forgotten when untimed work comes
    between them and the next timed step (the loop's evaluation before more timing)."""
    import advisor.machine.timing as timing

    gpu = _VirtualGpu(host_s=0.001, device_s=0.0)
    monkeypatch.setattr(timing, "time", gpu)
    timer = StepTimer(sync=gpu.sync, block_s=0.01)
    with timer.step():  # sizes the blocks: 10 steps
        gpu.step()
    for _ in range(3):
        with timer.step():
            gpu.step()
    timer.discard_open()
    gpu.now += 5.0  # an evaluation
    for _ in range(9):
        with timer.step():
            gpu.step()
    assert timer.steps == 10 and timer.samples == [pytest.approx(0.001)]


# ---- interference: synthetic blocks and counters (known truth) -------------------------

def _counts(wait_share: float) -> dict[str, float]:
    run = 0.01
    return {"run_s": run, "wait_s": run * wait_share / (1 - wait_share), "steal_s": 0.0, "cpus_s": 0.02,
            "nivcsw": 2.0 if wait_share > 0.1 else 0.0, "cpu_s": 0.01, "threads": 3.0}


def _fed(blocks: list[tuple[float, float]], limit: float | None = None) -> StepTimer:
    """A timer fed ``(seconds per step, wait share)`` blocks of one step each."""
    timer = StepTimer(min_steps=1, max_seconds=100.0, block_s=0.0, min_blocks=5, limit=limit, counters=lambda: None)
    for seconds, wait in blocks:
        timer.add_steps(seconds, 1, _counts(wait))
    return timer


def test_disturbed_blocks_are_dropped_from_the_step_time():
    quiet = [(0.010 + 0.0001 * (i % 3), 0.01 + 0.002 * (i % 3)) for i in range(20)]
    busy = [(0.016, 0.45), (0.015, 0.4), (0.017, 0.5)]  # a neighbour took slices from three blocks
    timer = _fed(quiet[:10] + busy + quiet[10:])
    assert timer.result().median_s == pytest.approx(0.0101)  # the busy blocks do not count
    report = timer.interference()
    assert report["blocks"] == 23 and report["dropped"] == 3 and report["clean"] == 20
    assert not report["too_few_clean"] and report["limit_from"] == "trial" and report["limit"] > 0.02
    assert [w["block"] for w in report["why"]] == [10, 11, 12] and report["why"][0]["slower"] > 1.5
    assert report["nivcsw"] == 6.0 and report["threads"] == 3.0 and report["cpu_per_wall"] > 0
    everything = _fed(quiet[:10] + busy + quiet[10:], limit=1.0)  # a study limit nothing reaches
    assert everything.interference()["dropped"] == 0 and everything.interference()["limit_from"] == "study"


def test_a_faster_block_is_never_dropped():
    quiet = [(0.010, 0.01)] * 12
    timer = _fed(quiet + [(0.007, 0.5)])  # much waiting, yet faster: no slowdown to drop
    assert timer.interference()["dropped"] == 0


def test_a_trial_disturbed_throughout_keeps_too_few_clean_blocks():
    """The study's limit (from its quiet trials) catches a neighbour that lasted the whole
    trial, which the trial's own spread cannot: it is then run again."""
    busy = [(0.015 + 0.0001 * (i % 2), 0.4) for i in range(12)]
    assert _fed(busy).interference()["dropped"] == 0  # alone, all blocks look alike
    timer = _fed(busy, limit=0.05)
    report = timer.interference()
    assert report["dropped"] == 12 and report["too_few_clean"]
    assert timer.result().median_s == pytest.approx(0.01505)  # all blocks: the trial runs again anyway
    assert not timer.converged()


def test_convergence_counts_clean_blocks_only():
    quiet = [(0.010, 0.01)] * 4 + [(0.016, 0.5)] * 3
    timer = _fed(quiet)
    assert not timer.converged()  # 4 clean blocks < min_blocks 5
    timer.add_steps(0.010, 1, _counts(0.01))
    assert timer.converged()


def test_without_counters_no_block_is_dropped():
    timer = StepTimer(min_steps=1, block_s=0.0, min_blocks=2, counters=lambda: None)
    for _ in range(10):
        with timer.step():
            pass
    assert timer.interference() is None and len(timer.samples) == 10


def test_the_counters_are_read_where_each_window_opens_and_closes():
    ticks = iter(range(1000))

    def counters():  # every reading: 1 ms more on a CPU, 0.5 ms more waiting for one
        n = next(ticks)
        return {"run_s": 0.001 * n, "wait_s": 0.0005 * n, "steal_s": 0.0, "cpus_s": 0.002 * n, "nivcsw": float(n),
                "cpu_s": 0.001 * n, "threads": 3.0}
    timer = StepTimer(min_steps=1, block_s=0.0, min_blocks=3, counters=counters)
    for _ in range(4):
        with timer.step():
            pass
    assert len(timer.counts) == 4
    assert all(c["run_s"] == pytest.approx(0.001) and c["wait_s"] == pytest.approx(0.0005) for c in timer.counts)
    assert timer.interference()["scores"] == [pytest.approx(1 / 3, abs=1e-4)] * 4


def test_real_counters_on_this_machine_read_or_say_none():
    from advisor.machine.interference import difference, read_counters

    first = read_counters()
    if first is None:  # not Linux
        pytest.skip("no /proc here")
    sum(range(100_000))
    d = difference(first, read_counters())
    assert d["run_s"] >= 0 and d["wait_s"] >= 0 and d["threads"] >= 1 and d["cpu_s"] >= 0


def test_a_data_parallel_rank_waiting_alike_in_every_block_drops_nothing(monkeypatch):
    """Ranks sharing the machine wait for each other's CPUs in every block: judged against
    their own spread too, so a steady wait is the configuration and only a burst is dropped."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    busy = [(0.015 + 0.0001 * (i % 2), 0.4) for i in range(12)]
    assert _fed(busy, limit=0.05).interference()["dropped"] == 0
    burst = busy[:11] + [(0.05, 0.95)]
    assert _fed(burst, limit=0.05).interference()["dropped"] == 1


def test_blocks_another_rank_found_disturbed_are_dropped_too():
    """Each block keeps when it ran; a rank drops its own disturbed blocks and, once told,
    the slower of its blocks that overlap another rank's (synthetic windows: known truth)."""
    timer = StepTimer(min_steps=1, max_seconds=100.0, block_s=0.0, min_blocks=5, counters=lambda: None)
    steps = [0.010] * 10 + [0.020, 0.020, 0.010] + [0.010] * 7
    waits = [0.01] * 12 + [0.6] + [0.01] * 7  # block 12 this rank's own (not slower: kept)
    for i, (seconds, wait) in enumerate(zip(steps, waits)):
        timer.add_steps(seconds, 1, _counts(wait), window=(float(i), i + 1.0))
    assert timer.block_windows[3] == (3.0, 4.0) and timer.interference()["dropped"] == 0
    assert timer.disturbed_windows() == []
    timer.note_elsewhere([(10.2, 11.5), (19.5, 30.0)])  # the other rank's disturbed blocks
    assert timer.dropped()[0] == [10, 11]  # block 19 overlaps too, but was not slower
    report = timer.interference()
    assert report["dropped"] == 2 and report["dropped_for_another_rank"] == 2
    assert all(w["another_rank"] for w in report["why"])
    assert timer.result().median_s == pytest.approx(0.010)
    assert timer.disturbed_windows() == []  # what it tells the others: its own judgement only


def test_a_block_made_of_several_timed_stretches_spans_them_all():
    timer = StepTimer(min_steps=1, block_s=1.0, counters=lambda: None)
    timer.add_steps(0.25, 1, None, window=(5.0, 5.25))  # sizes blocks of 4 steps
    timer.add_steps(0.75, 3, None, window=(6.0, 6.75))
    timer.add_steps(1.0, 4, None)  # no window known
    assert timer.block_windows == [(5.0, 6.75), None]


def test_two_real_ranks_drop_the_blocks_one_of_them_was_disturbed_in(tmp_path):
    """Two gloo ranks (forks of this process) step in lockstep through an all-reduce; rank 1
    is held up in four steps and a stand-in for its interference counters says it waited
    then (a real neighbour cannot be summoned on cue). Rank 0's own counters are quiet, yet
    after ``share_disturbed`` through the real process group's store it drops the blocks
    in which it waited for rank 1."""
    import json
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(_disturbed_rank, args=(port, str(tmp_path / "rank")), nprocs=2, join=True,
                       start_method="fork")
    r0, r1 = (json.loads((tmp_path / f"rank.{r}").read_text()) for r in range(2))
    assert r1["own"] >= 3 and r0["own"] == 0  # only rank 1's counters saw it
    assert r0["after"] >= 3 and r0["for_another_rank"] == r0["after"]
    assert r0["median_after"] < 0.5 * r0["median_before_slow"]


def _disturbed_rank(rank: int, port: int, out: str) -> None:
    import json
    import os
    from types import SimpleNamespace

    import torch.distributed as dist

    from advisor.trial.shared import share_disturbed

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    held = {"wait_s": 0.0, "run_s": 0.0}

    def counters() -> dict[str, float]:  # stand-in: rank 1's wait grows while it is held up
        return {"run_s": held["run_s"], "wait_s": held["wait_s"], "steal_s": 0.0, "cpus_s": 1.0}

    timer = StepTimer(min_steps=1, max_seconds=100.0, block_s=0.0, min_blocks=5, counters=counters)
    flag = torch.zeros(1)
    for i in range(24):
        with timer.step():
            slow = rank == 1 and 12 <= i < 16
            if slow:
                time.sleep(0.05)  # rank 0 waits for this in the all-reduce
            held["run_s"] += 0.002
            held["wait_s"] += 0.05 if slow else 0.0001
            dist.all_reduce(flag)
            time.sleep(0.002)
    own = len(timer.dropped()[0])
    slow_median = sorted(timer.samples)[-2]
    share_disturbed(SimpleNamespace(ranks=SimpleNamespace(rank=rank, world=2)), timer)
    report = timer.interference()
    with open(f"{out}.{rank}", "w") as fh:
        json.dump({"own": own, "after": report["dropped"],
                   "for_another_rank": report["dropped_for_another_rank"],
                   "median_after": timer.result().median_s, "median_before_slow": slow_median}, fh)
    dist.barrier()
    os._exit(0)  # as advisor's ranks leave: gloo's teardown can abort a finished process


def test_a_cpu_trial_whose_threads_and_loader_workers_outnumber_its_cpus_is_self_contended():
    import os

    import torch

    from advisor.core.config import TrialConfig
    from advisor.trial.loop import _self_contended

    cpus = len(os.sched_getaffinity(0))
    threads = torch.get_num_threads()
    assert _self_contended(TrialConfig(num_workers=cpus), "cpu")  # at least one thread beside cpus workers
    assert _self_contended(TrialConfig(), "cpu") == (threads > cpus)
    assert not _self_contended(TrialConfig(num_workers=cpus), "cuda")  # the GPU computes: the host may wait
