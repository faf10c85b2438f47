"""Parsing and formatting the numbers a user reads and types: sizes, rates, ratios,
metric differences, and the first line of a message."""

from __future__ import annotations

import re

from advisor.core.errors import StudyError

_SIZE_UNITS = {"": 1, "b": 1, "k": 2**10, "kib": 2**10, "kb": 10**3, "m": 2**20, "mib": 2**20, "mb": 10**6,
               "g": 2**30, "gib": 2**30, "gb": 10**9, "t": 2**40, "tib": 2**40, "tb": 10**12}


def parse_size(text: str | None, what: str = "--memory-cap") -> int | None:
    """'2GiB', '500MiB', '1.5G', '123456' -> bytes (None stays None).

    Raises:
        StudyError: naming ``what`` (the flag or field) when the text is not a positive size.
    """
    if text is None:
        return None
    raw = text.strip().lower()
    number = raw.rstrip("abcdefghijklmnopqrstuvwxyz")
    try:
        value = float(number) * _SIZE_UNITS[raw[len(number):].strip()]
    except (ValueError, KeyError):
        raise StudyError(f"{what} {text!r} is not a size (expected e.g. 2GiB, 500MiB or bytes)") from None
    if value <= 0:
        raise StudyError(f"{what} must be positive, found {text!r}")
    return int(value)


def fmt_bytes(n: float | None) -> str:
    """41943040 -> '40.0 MiB'."""
    if n is None:
        return "-"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def fmt_energy(joules: float | None) -> str:
    """0.01234 -> '12.3 mJ/sample'; 2.5 -> '2.5 J/sample' (energy per sample on a GPU)."""
    if joules is None:
        return "-"
    if abs(joules) < 1.0:
        return f"{1000 * joules:.3g} mJ/sample"
    return f"{joules:.3g} J/sample"


def fmt_rate(x: float | None) -> str:
    """5123.4 -> '5,123' (samples/s)."""
    return "-" if x is None else f"{x:,.0f}"


def fmt_ratio(ratio: float | None) -> str:
    """1.7634 -> '1.76x' (a ratio to the baseline)."""
    return "-" if ratio is None else f"{ratio:.2f}x"


_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?:in)?)?(?:(\d+(?:\.\d+)?)s)?")


def parse_duration(text: str) -> float:
    """Seconds from '90', '90s', '30m', '2h', '1h30m' (ValueError with the reason)."""
    value = str(text).strip().lower().replace(" ", "")
    try:
        return float(value)
    except ValueError:
        pass
    match = _DURATION.fullmatch(value)
    if not value or match is None or not any(match.groups()):
        raise ValueError(f"expected a duration such as 90, 90s, 30m, 2h or 1h30m, found {text!r}")
    hours, minutes, seconds = (float(g or 0) for g in match.groups())
    return 3600 * hours + 60 * minutes + seconds


def plural(n: int, word: str, words: str | None = None) -> str:
    """'1 proposal', '2 proposals' ('1 configuration needed', with ``words`` for the plural)."""
    return f"{n} {word if n == 1 else (words or word + 's')}"


def duration_flag(seconds: float) -> str:
    """A duration as --budget takes it, the way people type it: '30m', '1h30m', '90s', '2h'."""
    if seconds != int(seconds) or seconds < 60 or int(seconds) % 60:
        return f"{seconds:g}s"
    hours, minutes = divmod(int(seconds) // 60, 60)
    return (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes or not hours else "")


def duration_text(seconds: float) -> str:
    """'45 s', '3 min 20 s', '2 h 05 min'."""
    seconds = max(0.0, float(seconds))
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def clock_text(elapsed_s: float, limit_s: float, flag: str | None = None) -> str:
    """A study's time against its limit, as its lines show it (with ``flag``, the limit too).

    Example:
        >>> clock_text(65.2, 1800)
        '1 min 05 s elapsed, 28 min 55 s left'
        >>> clock_text(700, 600, "--timeout")
        '11 min 40 s elapsed, 0 s left of --timeout 10 min 00 s'
    """
    elapsed_s = max(0.0, elapsed_s)
    left = max(0.0, limit_s - elapsed_s)
    return f"{duration_text(elapsed_s)} elapsed, {duration_text(left)} left" + (
        f" of {flag} {duration_text(limit_s)}" if flag else "")


def first_line(message: str | BaseException | None, limit: int = 300) -> str:
    """The first non-empty line of a message or an exception, at most ``limit`` characters
    (an exception with no message gives its type's name)."""
    text = str(message or "").strip()
    if not text and isinstance(message, BaseException):
        text = type(message).__name__
    line = (text.splitlines() or [""])[0]
    return line if len(line) <= limit else line[:max(0, limit - 1)] + "…"  # cut where it says so

