"""The base of every knob, and small helpers the knob modules share."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from advisor.core.config import DOMAINS, Choice

if TYPE_CHECKING:
    from advisor.machine.hardware import Hardware
    from advisor.techniques.prepared import Prepared


class Technique:
    """Base of every knob. Subclasses set ``key`` (a TrialConfig field) and
    ``description``; the valid values are the field's domain (``advisor.core.config.DOMAINS``),
    and the knob's place in ``apply`` is its place in ``registry.APPLY_ORDER``."""

    key: ClassVar[str]
    description: ClassVar[str]
    read_by: ClassVar[str | None] = None  # a companion: the knob whose apply reads this one's value
    train_only: ClassVar[tuple[Any, ...]] = ()      # values that mean something only in training
    inference_only: ClassVar[tuple[Any, ...]] = ()  # values that need the inference workload

    @property
    def values(self) -> tuple[Any, ...]:
        """The knob's values when it is a choice (empty for integer and fraction knobs)."""
        domain = DOMAINS[self.key]
        return domain.values if isinstance(domain, Choice) else ()

    def check(self, value: Any) -> str | None:
        """Is ``value`` a valid setting at all? ``None`` if so, else what is expected."""
        return DOMAINS[self.key].check(value)

    def candidate_values(self, hw: Hardware) -> list[Any]:
        """Values listed in the capability table for this hardware."""
        return list(self.values)

    def applies(self, hw: Hardware) -> str | None:
        """``None`` if this knob means anything on ``hw``; else why not. A knob that does
        not apply is removed from the space (its default is used), not an error."""
        return None

    def unavailable(self, value: Any, hw: Hardware) -> str | None:
        """Why ``value`` cannot run on ``hw``; ``None`` when it can."""
        return None

    def pointless(self, value: Any, facts: dict[str, Any]) -> str | None:
        """Why ``value`` cannot help this workload (``facts`` from the preflight); ``None``
        when it may. Used to drop options before the search, never to guess a speedup."""
        return None

    def preload(self, value: Any) -> tuple[str, ...]:
        """What a trial with ``value`` imports lazily, as ``"module:name"``
        (``advisor.trial._preload``): a CPU study's fork server imports it once for every
        trial of a space holding ``value``, instead of each such trial (compile: inductor,
        about 0.8 s a trial here). Empty: nothing worth importing ahead."""
        return ()

    def wrong_workload(self, value: Any, workload: str) -> str | None:
        """Why ``value`` cannot be used for ``workload`` ("train" or "inference")."""
        if workload == "inference" and value in self.train_only:
            return f"{self.key}={value!r} only applies to training; this is an inference workload"
        if workload == "train" and value in self.inference_only:
            return f"{self.key}={value!r} is for inference (--workload inference); this is a training workload"
        return None

    def apply(self, value: Any, prepared: Prepared) -> None:
        """Apply ``value`` to the prepared model and step. No-op by default."""

    def snippet(self, value: Any) -> str | None:
        """Plain PyTorch equivalent of ``value``, or ``None`` when nothing is needed."""
        return None


def plain_tensor(t: Any) -> bool:
    """A plain tensor or parameter, not a torchao quantized / sparse / DTensor subclass."""
    import torch

    return type(t) in (torch.Tensor, torch.nn.Parameter)
