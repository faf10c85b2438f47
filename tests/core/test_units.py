"""Small text helpers every view uses."""

from __future__ import annotations

from advisor.core.units import first_line


def test_a_cut_first_line_says_it_was_cut():
    """A review read `pipeline parallelism sp` in a failure column: cut with no sign of it."""
    assert first_line("short\nsecond line", 80) == "short"
    long = "tensor parallelism splits Linear layers across ranks and needs two devices"
    assert first_line(long, 30) == long[:29] + "…" and len(first_line(long, 30)) == 30
    assert first_line(long, len(long)) == long
    assert first_line(ValueError()) == "ValueError" and first_line(None) == ""
