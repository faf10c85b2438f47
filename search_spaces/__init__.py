"""Shipped search-space presets (``*.yaml`` in this package), loaded by name."""

from __future__ import annotations

from importlib import resources


def names() -> list[str]:
    """Names of the shipped presets, e.g. ['default', ...]."""
    return sorted(p.name[:-5] for p in resources.files(__name__).iterdir() if p.name.endswith(".yaml"))


def read(name: str) -> str | None:
    """The YAML text of preset ``name``, or None if there is no such preset."""
    entry = resources.files(__name__) / f"{name}.yaml"
    return entry.read_text() if entry.is_file() else None
