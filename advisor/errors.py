"""The exceptions advisor raises. The CLI turns each into a message and an exit status."""

from __future__ import annotations


class AdvisorError(Exception):
    """Root of every error advisor raises on purpose.

    ``exit_code`` is what the CLI exits with: 2 for bad input the user can fix,
    1 for a failure at run time.
    """

    exit_code = 2


class WorkloadError(AdvisorError):
    """Raised when model.py is missing, does not import, or breaks the model.py contract."""


class SpaceError(AdvisorError):
    """Raised when a search space file is missing, not YAML, or invalid.

    All problems found are listed together in ``problems``.
    """

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"search space {source} is invalid:\n{lines}")


class ConfigError(AdvisorError):
    """Raised when an exported or hand-written configuration file is invalid."""


class StudyError(AdvisorError):
    """Raised for bad study arguments: storage URL, study name, trial numbers, flags."""


class SchedulerError(AdvisorError):
    """Raised when Ray cannot start or no node has the resources a trial needs."""


class UnsupportedError(AdvisorError):
    """Raised inside a trial when a technique refuses this model or device.

    The trial is recorded with failure class ``unsupported``.
    """


class TrialFailed(AdvisorError):
    """Raised at run time when a trial that must succeed (the baseline) fails."""

    exit_code = 1
