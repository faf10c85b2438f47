"""Whether a configuration's memory is at stake: the memory plan made before a trial
(``advisor.trial.estimate``, ~0.2-0.5 s a trial) is worth its time only where its answer
could stop the trial, that is where the configuration might not fit under ``--memory-cap``
or in the device's memory.

The study knows the peaks it has measured. A configuration with batch size ``b`` is taken
to need at most ``MARGIN`` times the largest measured peak scaled to ``b`` (a peak at
batch ``a`` counts ``max(1, b / a)`` times: activations grow with the batch, weights and
optimizer state do not shrink with it). ``MARGIN`` covers what the knobs can add at one
batch size against the configurations measured so far (fp32 against bf16 weights,
torch.compile's buffers, checkpointing off, QAT's observers). Until a peak is measured, or
where the need comes within the limit, the plan is made; where no limit is known (no cap,
the device's memory unknown), nothing could stop the trial and it is not.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MARGIN = 4.0


@dataclass
class MeasuredPeaks:
    """The peak memory (bytes per rank) the study measured, with each one's batch size."""

    peaks: list[tuple[int, float]] = field(default_factory=list)

    def add(self, batch_size: int | None, peak_bytes: float | None) -> None:
        if batch_size and batch_size > 0 and peak_bytes and peak_bytes > 0:
            self.peaks.append((batch_size, float(peak_bytes)))

    def need(self, batch_size: int) -> float | None:
        """The most a configuration of ``batch_size`` is taken to need (None before any peak)."""
        if not self.peaks:
            return None
        return MARGIN * max(peak * max(1.0, batch_size / measured) for measured, peak in self.peaks)

    def at_stake(self, batch_size: int, limit: float | None, ranks: int = 1) -> bool:
        """Whether a configuration of ``batch_size`` might not fit in ``limit`` bytes (the
        smaller of the cap and the device's memory; None: none known); ``ranks``: how many
        of its ranks share that memory (a CPU trial's, on one machine)."""
        if limit is None:
            return False
        need = self.need(batch_size)
        return need is None or need * ranks >= limit
