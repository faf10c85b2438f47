"""The trials running on the executor right now: which configuration and which part each
runs (``full``, ``probe`` or ``training``: ``advisor.core.results.PARTS``), whether another fits, and what came back."""

from __future__ import annotations

import time
from dataclasses import dataclass

from advisor.core.results import TrialPayload, TrialResult
from advisor.runner.executor import Executor, Handle, overran, timeout_failure
from advisor.search.strategy import Proposal


@dataclass(frozen=True)
class Done:
    """A part that came back (or ran out of time): its trial, what it ran, and its result."""

    number: int
    proposal: Proposal
    part: str
    result: TrialResult
    wall_s: float


class Slots:
    """Args: executor: where the parts run (its ``slots``, its ``device``)."""

    def __init__(self, executor: Executor) -> None:
        self.executor = executor
        self.running: dict[int, tuple[Handle, Proposal, str]] = {}

    def __len__(self) -> int:
        return len(self.running)

    @property
    def free(self) -> bool:
        return len(self.running) < self.executor.slots

    def fits(self, proposal: Proposal) -> bool:
        """Whether it can start now: a free node (CPU; the nodes its ranks span), or
        ``devices`` free GPUs. An executor says what a trial takes with ``slots_for``
        (else: one slot on CPU, its devices on CUDA)."""
        def takes(p: Proposal) -> int:
            weigh = getattr(self.executor, "slots_for", None)
            if weigh is not None:
                return int(weigh(p.config))
            return p.config.devices if self.executor.device == "cuda" else 1

        in_use = sum(takes(p) for _, p, _ in self.running.values())
        return in_use + takes(proposal) <= self.executor.slots

    def submit(self, proposal: Proposal, payload: TrialPayload, part: str) -> None:
        self.running[proposal.number] = (self.executor.submit(proposal.number, payload), proposal, part)

    def part(self, number: int) -> str:
        return self.running[number][2]

    def done(self, timeout: float) -> list[Done]:
        """Wait briefly; the parts that finished, and those running longer than ``timeout``
        (cancelled, as ``timeout`` failures). They are no longer running."""
        out = []
        handles = [h for h, _, _ in self.running.values()]
        for handle, result in self.executor.wait(handles, timeout=0.5):
            _, proposal, part = self.running.pop(handle.number)
            out.append(Done(handle.number, proposal, part, result, time.monotonic() - handle.submitted))
        now = time.monotonic()
        for number, (handle, proposal, part) in list(self.running.items()):
            why = overran(handle, timeout)
            if why:
                self.executor.cancel(handle)
                self.running.pop(number)
                result = timeout_failure(why, timeout, f"the trial timeout ({timeout:.0f} s)")
                out.append(Done(number, proposal, part, result, now - handle.submitted))
        return out

    def cancel_all(self) -> list[Done]:
        """Cancel every running part; each as a ``cancelled`` result."""
        out = []
        for number, (handle, proposal, part) in list(self.running.items()):
            self.executor.cancel(handle)
            self.running.pop(number)
            out.append(Done(number, proposal, part, TrialResult.failed("cancelled", "cancelled"),
                            time.monotonic() - handle.submitted))
        return out
