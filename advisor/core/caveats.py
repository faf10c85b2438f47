"""Why a trial's samples/s may read wrong, in the words every view shows them in.

Two things make one trial's speed less trustworthy than the others', both read from its
stored telemetry:

- **busy**: its timed blocks lost over ``interference.CEILING`` of their time at the
  median to other work (waiting for a CPU, or stolen). Its speed reads slow by an unknown
  amount; two-stage evaluation does not rule it out on that speed (``interference.busy``).
- **unsettled**: its step timer ran out of time (or blocks) before the median step was
  known to the study's tolerance (``machine.timing``: ``converged`` false). Its figure
  stands, with a wider interval than the others'.

The live trial line says each in full; tables mark the samples/s cell (``mark``) and say
once in their caption what the marks mean (``legend``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from advisor.core.interference import CEILING, busy, disturbance
from advisor.core.settle import MIN_BLOCKS, TOLERANCE, halfwidth
from advisor.core.units import plural

BUSY, UNSETTLED = "busy", "unsettled"


@dataclass(frozen=True)
class Caveat:
    kind: str  # BUSY or UNSETTLED
    text: str  # the sentence a trial's line shows

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "text": self.text}


def speed_caveats(telemetry: dict[str, Any] | None) -> list[Caveat]:
    """What makes this trial's measured speed less sure than the rest ([] for a clean one,
    and for a trial with no timing stored: a training run of two-stage evaluation, a
    failure, one stored before advisor recorded it)."""
    found = []
    if busy(telemetry):
        found.append(Caveat(BUSY, f"timed on a busy machine: its timed blocks lost a median "
                                  f"{100 * disturbance(telemetry)[1]:.0f}% of their time to other work (over "
                                  f"{100 * CEILING:.0f}% reads slow by an unknown amount)"))
    latency = (telemetry or {}).get("latency")
    if not found and isinstance(latency, dict) and latency.get("busy"):
        found.append(Caveat(BUSY, f"its latency was timed on a busy machine: the windows of its calls lost a median "
                                  f"over {100 * CEILING:.0f}% of their time to other work, so it reads slow by an "
                                  "unknown amount"))
    timing = (telemetry or {}).get("timing")
    if isinstance(timing, dict) and timing.get("converged") is False and timing.get("median_s"):
        said = _unsettled_text(timing)
        if said:
            found.append(Caveat(UNSETTLED, said))
    return found


def _unsettled_text(timing: dict[str, Any]) -> str | None:
    """Why a timing that did not converge is less sure, or None when its figure is as sure
    as the study asked after all (its timer stopped short of the steps or clean blocks a
    verdict wants, yet enough blocks agree to the tolerance)."""
    low, high, blocks, asked = (timing.get(k) for k in ("low_s", "high_s", "blocks", "tolerance"))
    blocks = blocks if isinstance(blocks, int) else 0
    numbers = isinstance(low, (int, float)) and isinstance(high, (int, float))
    width = halfwidth(float(low), float(high), blocks) if numbers else math.inf  # type: ignore[arg-type]
    tolerance = asked if isinstance(asked, (int, float)) else TOLERANCE
    if blocks < MIN_BLOCKS:
        return (f"its timing did not settle in the time allowed: {plural(blocks, 'timed block')} after the warm-up, "
                f"fewer than the {MIN_BLOCKS} a verdict needs, so its median step is not known to "
                f"+-{100 * tolerance:.0f}%")
    if math.isfinite(width) and width <= tolerance:
        return None
    known = f"about +-{100 * math.expm1(width):.0f}%" if math.isfinite(width) else "no interval"
    return (f"its timing did not settle in the time allowed: its median step is known to {known} "
            f"(the study asked +-{100 * tolerance:.0f}%)")


def mark(caveats: Iterable[Caveat]) -> str:
    """The suffix a table puts after the samples/s figure: ' (busy)', ' (unsettled)', both, or ''."""
    kinds = [c.kind for c in caveats]
    return f" ({', '.join(kinds)})" if kinds else ""


def legend(kinds: Iterable[str], more: str = "`advisor trials` says by how much") -> str:
    """A caption's sentence saying what the marks in its table mean ('' when none shows),
    and where a reader finds the figures (``more``)."""
    present = set(kinds)
    parts = ([f"(busy): timed on a busy machine, its blocks lost over {100 * CEILING:.0f}% of their time to "
              "other work, so it reads slow by an unknown amount"] if BUSY in present else []) + (
             ["(unsettled): its timing did not settle in the time allowed, so its figure is less sure than "
              "the others'"] if UNSETTLED in present else [])
    return f"After samples/s, {'; '.join(parts)} ({more})" if parts else ""
