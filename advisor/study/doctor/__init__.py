"""``advisor doctor``: ``offered`` (which knob options this machine offers and each one's
run, with what it cannot run without) and ``checkup`` (each option run alone in a fresh
trial process beside the reference run; the verdicts). Imports nothing else of
``advisor.study``."""

__all__ = ["checkup", "offered"]
