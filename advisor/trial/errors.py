"""Errors of the trial process itself, never raised to a user: a trial turns them into a
recorded failure (``advisor.trial.single.classify``)."""

from __future__ import annotations

from advisor.core.errors import AdvisorError


class NonFiniteLoss(AdvisorError):
    """The loss became NaN or infinite: the configuration diverged (failure class ``error``)."""
