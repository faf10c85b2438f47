"""advisor: an auto-tuning optimization advisor for PyTorch.

Public API::

    import advisor
    config = advisor.load_config("best.yaml")     # an exported configuration
    prepared = advisor.apply(model, config)       # the setup that was measured
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = [
    "AdvisorError", "Prepared", "TrialConfig", "TrialResult", "apply", "load_config", "__version__",
]

# Bound eagerly: the submodule advisor.apply shares the function's name, and a lazy
# lookup would be shadowed by the module once anything imports advisor.apply.
from advisor.apply import Prepared, apply  # noqa: E402  (light: torch loads on first use)

_LAZY = {
    "TrialConfig": "advisor.config",
    "load_config": "advisor.config", "TrialResult": "advisor.trial", "AdvisorError": "advisor.errors",
}


def __getattr__(name: str) -> Any:
    # Lazy: `import advisor` (and `advisor --help`) stays fast; torch loads on first use.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'advisor' has no attribute {name!r}")
