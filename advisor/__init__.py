"""advisor: an auto-tuning optimization advisor for PyTorch.

Public API::

    import advisor
    config = advisor.load_config("best.yaml")     # an exported configuration
    prepared = advisor.apply(model, config)       # the setup that was measured
    result = advisor.tune(make_model, make_datasets, trials=20)   # advisor tune, from Python

Everything listed in ``__all__`` is public; the packages below are the engine's rooms
(docs/layout.md). Every error a public function raises derives from ``AdvisorError``.
"""

from __future__ import annotations

import importlib
from typing import Any

from advisor.core.version import VERSION as __version__

# name -> the module that defines it; imported on first use, so `import advisor` (and
# `advisor --help`) stays fast and torch loads only when a model is prepared.
_PUBLIC = {
    "apply": "advisor.techniques.prepare",
    "tune": "advisor.api.tune",
    "TuneResult": "advisor.api.result",
    "Prepared": "advisor.techniques.prepared",
    "load_config": "advisor.core.export_format",
    "TrialConfig": "advisor.core.config",
    "TrialResult": "advisor.core.results",
    "AdvisorError": "advisor.core.errors",
    "BaselineFailed": "advisor.core.errors",
    "ConfigError": "advisor.core.errors",
    "FrozenModelError": "advisor.core.errors",
    "SchedulerError": "advisor.core.errors",
    "SpaceError": "advisor.core.errors",
    "StorageError": "advisor.core.errors",
    "StudyError": "advisor.core.errors",
    "TrialFailed": "advisor.core.errors",
    "UnsupportedError": "advisor.core.errors",
    "WorkloadError": "advisor.core.errors",
}

__all__ = [
    "AdvisorError", "BaselineFailed", "ConfigError", "FrozenModelError", "Prepared", "SchedulerError", "SpaceError", "StorageError",
    "StudyError", "TrialConfig", "TrialFailed", "TrialResult", "TuneResult", "UnsupportedError", "WorkloadError",
    "__version__", "apply", "load_config", "tune",
]


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
        globals()[name] = value  # looked up once
        return value
    raise AttributeError(f"module 'advisor' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
