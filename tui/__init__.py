"""advisor's terminal explorer (Textual), installed as ``advisor.tui``. It reads studies
through the engine (advisor.core, advisor.study, advisor.outputs); the engine never
imports it, and only the command line (``advisor tui``, the live view of ``advisor tune``)
starts it."""

from advisor.tui.app import AdvisorApp, make_app

__all__ = ["AdvisorApp", "make_app"]
