"""The exceptions advisor raises on purpose. The CLI prints each one's message (no
traceback) to stderr and exits with its ``exit_code``:

- 2: refused before anything ran (bad input: a flag, a file, model.py; or a storage or
  Ray cluster named by the user that cannot serve the command). Nothing is written.
- 1: a failure at run time, after the study started (the baseline trial failed, the
  storage stopped answering).

Failures of a configuration inside a trial are not exceptions: they are results
(``TrialResult.failed``) with a failure class.
"""

from __future__ import annotations


class AdvisorError(Exception):
    """Root of every error advisor raises on purpose.

    ``exit_code`` is what the CLI exits with: 2 for input the user can fix, 1 for a
    failure at run time.
    """

    exit_code = 2


class WorkloadError(AdvisorError):
    """Raised when model.py is missing, does not import, or breaks the model.py contract."""


class FrozenModelError(WorkloadError):
    """Raised where model() is to be trained but returned a module with no trainable
    parameter (a model frozen for serving: an inference study measures it)."""


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
    """Raised when a configuration (an exported file, a mapping given to ``apply()``, a
    workload kind) is invalid. Every problem is listed together."""


class StudyError(AdvisorError):
    """Raised for bad study arguments: storage URL, study name, trial numbers, options."""


class StorageError(AdvisorError):
    """Raised at run time when the study's storage stops serving it: the database server
    stayed unreachable longer than the wait (``$ADVISOR_STORAGE_WAIT``, 60 s), or the disk
    holding it is full. The study stops (running trials cancelled); what is stored stays
    readable, and the same command resumes the study once the storage is back."""

    exit_code = 1


class SchedulerError(AdvisorError):
    """Raised before any trial runs when Ray cannot start, the cluster named by
    ``--ray-address`` cannot be reached, or no node has what a trial needs. Exit status 2:
    nothing was run or written, and the fix is in what the user named (address, cluster)."""


class UnsupportedError(AdvisorError):
    """Raised by ``apply()`` when a technique refuses this model, device or combination of
    knobs. Inside a trial it becomes a result with failure class ``unsupported``."""


class TrialFailed(AdvisorError):
    """Raised at run time when a trial that must succeed (the baseline) fails, or when
    every repeat of ``advisor measure`` fails."""

    exit_code = 1


class BaselineFailed(TrialFailed):
    """The study's baseline trial failed: nothing can be measured against it."""
