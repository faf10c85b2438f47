"""Table cells that fit the width there is without cutting a word, and round axis ticks
with units. No Textual here, so both are tested on their own."""

from __future__ import annotations

import math
from collections.abc import Sequence

ELLIPSIS = "…"
PADDING = 2  # a DataTable column's cell padding, both sides together


def clip_words(text: str, width: int) -> str:
    """``text`` if it fits in ``width``; else its first whole words and '…' ('1.52x
    unconfirmed' in 8 -> '1.52x …'); at least the first word and '…', never part of a word."""
    if len(text) <= width:
        return text
    words = text.split(" ")
    n = 1
    while n < len(words) and len(" ".join(words[:n + 1]).rstrip(",;:")) + 2 <= width:  # ' …'
        n += 1
    kept = " ".join(words[:n]).rstrip(",;:")
    return f"{kept} {ELLIPSIS}"


def fit_widths(headers: Sequence[str], columns: Sequence[Sequence[str]], shrinkable: Sequence[bool],
               width: int) -> list[int]:
    """Each column's width: its content's where the total (with padding) fits ``width``;
    else the widest shrinkable column narrowed first, to its cells' next shorter clipping
    each time, never below its header or its cells' first word and '…'."""
    natural = [max([len(h), *(len(c) for c in cells)]) for h, cells in zip(headers, columns)]
    floor = [max([len(h), *(len(clip_words(c, 0)) for c in cells)]) if s else n
             for h, cells, s, n in zip(headers, columns, shrinkable, natural)]
    widths = list(natural)
    while sum(widths) + PADDING * len(widths) > width:
        room = [i for i, w in enumerate(widths) if w > floor[i]]
        if not room:
            break
        widest = max(room, key=lambda i: widths[i])  # down to its next shorter clipping
        widths[widest] = max([len(headers[widest]), *(len(clip_words(c, widths[widest] - 1)) for c in columns[widest])])
    for i in sorted(range(len(widths)), key=lambda i: widths[i]):  # clipping overshoots: give back what fits
        spare = width - sum(widths) - PADDING * len(widths)
        if widths[i] < natural[i] and spare > 0:
            widths[i] = max(len(clip_words(c, widths[i] + spare)) for c in columns[i])
    return widths


def fit_cells(headers: Sequence[str], rows: Sequence[Sequence[str]], shrinkable: Sequence[bool],
              width: int) -> list[list[str]]:
    """``rows`` with their shrinkable cells clipped at word boundaries so that the columns
    fit ``width`` (as far as whole words allow)."""
    if not rows:
        return []
    columns = list(zip(*rows))
    widths = fit_widths(headers, columns, shrinkable, width)
    return [[clip_words(cell, w) if s else cell for cell, w, s in zip(row, widths, shrinkable)] for row in rows]


def nice_ticks(low: float, high: float, count: int = 6) -> list[float]:
    """About ``count`` round ticks (1, 2, 2.5 or 5 times a power of ten apart) covering
    ``low``..``high``: 4120..12500 -> 4000, 6000, ..., 14000 (2k apart)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return []
    if high < low:
        low, high = high, low
    if high == low:
        span = abs(low) or 1.0
        low, high = low - span / 10, high + span / 10
    raw = (high - low) / max(count - 1, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first, last = math.floor(low / step + 1e-9), math.ceil(high / step - 1e-9)
    return [round(i * step, 12) for i in range(first, last + 1)]


def tick_labels(ticks: Sequence[float]) -> list[str]:
    """Ticks in as few characters as their step needs, one suffix for all (from the
    largest): 4000, 6000 -> '4k', '6k'; 2500, 5000 -> '2.5k', '5k'; 0.96, 0.965 -> '0.96',
    '0.965'; 500, 1000 -> '0.5k', '1k'."""
    if not ticks:
        return []
    step = min((b - a for a, b in zip(ticks, ticks[1:])), default=abs(ticks[0]) or 1.0)
    top = max(abs(t) for t in ticks)
    factor, suffix = next(((f, s) for f, s in ((1e9, "G"), (1e6, "M"), (1e3, "k")) if top >= f), (1.0, ""))
    scaled_step = step / factor
    decimals = next((d for d in range(7) if abs(round(scaled_step, d) - scaled_step) < 1e-9 * scaled_step), 6)
    labels = []
    for value in ticks:
        text = f"{value / factor:.{decimals}f}"
        labels.append(f"{text.rstrip('0').rstrip('.') if '.' in text else text}{suffix}")
    return labels
