"""Known-OOM learning: once a configuration runs out of memory, the configurations that
need at least as much are not run again.

The rule (documented, deliberately conservative): configuration B needs at least as much
memory as configuration A when every knob is the same except the batch size, and B's
batch size is at least A's. (Same devices and accumulation, so B's micro-batches are at
least as large; everything else that decides memory is identical.) Such a B is recorded
as skipped, with A's trial number in the reason.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from advisor.core.config import TrialConfig
from advisor.core.stored import ESTIMATE, TrialRecord

ESTIMATED_OVER = "was estimated over the memory limit"  # how a skipped trial (not run) showed it
OVER_LIMIT = "known to be over the memory limit"  # what the reason says then: nothing ran out of memory


@dataclass
class KnownOom:
    """The configurations that ran out of memory so far, by trial number."""

    oomed: list[tuple[int, TrialConfig, str]] = field(default_factory=list)

    def add(self, number: int, config: TrialConfig, how: str = "ran out") -> None:
        self.oomed.append((number, config, how))

    def learn(self, records: Iterable[TrialRecord]) -> None:
        """Learn from stored trials (a resumed study): trials that ran out of memory, and
        those whose memory estimate was over the limit (skipped by the trial, not run)."""
        for r in records:
            if r.failure_class != "oom" or r.config is None:
                continue
            if r.state == "failed":
                self.add(r.number, r.config)
            elif r.state == "skipped" and r.get(ESTIMATE) is not None:
                self.add(r.number, r.config, ESTIMATED_OVER)

    def reason(self, config: TrialConfig) -> str | None:
        """Why ``config`` would run out of memory too, or None if nothing says so."""
        rest = {**config.to_dict(), "batch_size": None}
        for number, oomed, how in self.oomed:
            if {**oomed.to_dict(), "batch_size": None} == rest and config.batch_size >= oomed.batch_size:
                known = OVER_LIMIT if how == ESTIMATED_OVER else "known to run out of memory"
                return (f"{known}: trial {number} {how} with the same settings at batch size "
                        f"{oomed.batch_size}, and this needs batch size {config.batch_size}")
        return None
