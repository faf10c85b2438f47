"""Intra-op thread count of CPU trials (torch.set_num_threads)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from advisor.techniques._base import Technique

if TYPE_CHECKING:
    from advisor.machine.hardware import Hardware
    from advisor.techniques.prepared import Prepared


class Threads(Technique):
    key = "threads"
    description = "intra-op CPU threads (torch.set_num_threads); null keeps torch's default"

    def candidate_values(self, hw: Hardware) -> list[Any]:
        values, n = [], 1
        while n < hw.cpu.cores:
            values.append(n)
            n *= 2
        return values + [hw.cpu.cores]

    def applies(self, hw: Hardware) -> str | None:
        if hw.device != "cpu":
            return "the thread count is tuned only for CPU trials; this node runs trials on its GPU"
        return None

    def unavailable(self, value: Any, hw: Hardware) -> str | None:
        if value is None:
            return None
        not_here = self.applies(hw)
        if not_here:
            return not_here
        if value > hw.cpu.cores:
            return f"this machine has {hw.cpu.cores} cores available to a trial"
        return None

    def apply(self, value: Any, prepared: Prepared) -> None:
        import torch

        if value is not None:
            torch.set_num_threads(value)

    def snippet(self, value: Any) -> str | None:
        return None if value is None else f"torch.set_num_threads({value})"
