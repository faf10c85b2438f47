"""advisor/core/memory_stake.py: when the memory plan is worth making (pure arithmetic)."""

from __future__ import annotations

import pytest

from advisor.core.memory_stake import MARGIN, MeasuredPeaks

MiB, GiB = 2**20, 2**30


def test_before_any_peak_every_configuration_is_at_stake_where_a_limit_is_known():
    peaks = MeasuredPeaks()
    assert peaks.need(64) is None
    assert peaks.at_stake(64, 24 * GiB)
    assert not peaks.at_stake(64, None)  # no cap, no device memory: nothing could stop the trial


def test_the_need_scales_with_the_batch_from_the_largest_peak():
    peaks = MeasuredPeaks()
    peaks.add(64, 20 * MiB)
    peaks.add(32, 30 * MiB)  # a heavier configuration at a smaller batch
    assert peaks.need(32) == pytest.approx(MARGIN * 30 * MiB)
    assert peaks.need(256) == pytest.approx(MARGIN * max(20 * 4, 30 * 8) * MiB)  # 240 MiB, from the batch-32 peak
    assert peaks.need(8) == pytest.approx(MARGIN * 30 * MiB)  # a smaller batch is never taken to need less


def test_a_digits_study_spares_its_plans_and_a_tight_cap_or_device_keeps_them():
    peaks = MeasuredPeaks()
    peaks.add(64, 15.5 * MiB)  # the digits CNN's baseline, measured
    assert not peaks.at_stake(256, 20 * GiB)  # 248 MiB against 20 GiB: nothing to learn
    assert peaks.at_stake(256, 200 * MiB)  # --memory-cap 200 MiB: it might not fit
    assert peaks.at_stake(64, 62 * MiB)  # exactly at the margin: made
    assert not peaks.at_stake(64, 63 * MiB)
    assert peaks.at_stake(64, 200 * MiB, ranks=4)  # four CPU ranks share the machine's memory


def test_failed_or_empty_figures_teach_nothing():
    peaks = MeasuredPeaks()
    for batch, peak in ((None, 10 * MiB), (0, 10 * MiB), (64, None), (64, 0.0), (64, -1.0)):
        peaks.add(batch, peak)
    assert peaks.peaks == [] and peaks.at_stake(64, GiB)
