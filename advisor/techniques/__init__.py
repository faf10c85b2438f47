"""One module per knob. Each technique answers three questions:

* ``unavailable(value, hw)``: can this hardware do it? ``None`` if so, else the reason in
  words a user understands;
* ``apply(value, prepared)``: change the model / step setup (called by ``advisor.apply``);
* ``snippet(value)``: the plain-PyTorch lines a user would write instead.

Adding a knob: write a module with a ``Technique`` subclass, add it to ``TECHNIQUES``
and give ``TrialConfig`` a field of the same name. The space, the capability table,
``advisor hardware`` and export pick it up from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from advisor.apply import Prepared
    from advisor.hardware import Hardware


class Technique:
    """Base of every knob. Subclasses set ``key`` and ``values`` (or override ``check``)."""

    key: ClassVar[str]
    description: ClassVar[str]
    values: ClassVar[tuple[Any, ...]] = ()
    order: ClassVar[int] = 50  # apply order: lower first (compile comes last)
    train_only: ClassVar[tuple[Any, ...]] = ()      # values that mean something only in training
    inference_only: ClassVar[tuple[Any, ...]] = ()  # values that need the inference workload

    def check(self, value: Any) -> str | None:
        """Is ``value`` a valid setting at all? ``None`` if so, else what is expected."""
        if value not in self.values or isinstance(value, bool) != isinstance(self.values[0], bool):
            return f"expected one of {list(self.values)}, found {value!r}"
        return None

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


def check_int(value: Any, minimum: int) -> str | None:
    """``None`` if ``value`` is an integer >= ``minimum`` (bools are not integers here)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= minimum:
        return None
    return f"expected an integer >= {minimum}, found {value!r}"


def conflicts(config: Any) -> str | None:
    """Why these knob values cannot be combined (each is fine alone), or None.

    Checked by ``apply`` and by the study before a trial is submitted, so a combination
    that cannot work is recorded as ``unsupported`` without spending a trial on it.
    """
    c = config
    if c.parallelism != "ddp" and c.comm_hook != "none":
        return f"comm_hook={c.comm_hook} applies to DDP; parallelism is {c.parallelism}"
    if c.parallelism != "ddp" and c.bucket_mb != 25:
        return f"bucket_mb={c.bucket_mb} applies to DDP; parallelism is {c.parallelism}"
    if c.parallelism == "fsdp" and c.pruning != "none":
        return "pruning masks need whole weight tensors; FSDP shards them (use ddp, or prune without FSDP)"
    if c.parallelism == "fsdp" and c.quantization == "qat_int8":
        return "QAT conversion swaps Linear layers, which FSDP has sharded; use ddp or single with qat_int8"
    if c.parallelism == "fsdp" and c.channels_last:
        return "FSDP shards only contiguous parameters; channels_last weights are not (torch 2.13)"
    if c.parallelism == "fsdp" and c.precision == "fp16":
        return "fp16 with FSDP needs a sharded gradient scaler, which advisor does not set up; use bf16"
    if c.pruning != "none" and c.quantization == "fp8_training":
        return "fp8 training swaps Linear layers and would drop the pruning masks"
    if c.pruning == "semi_structured_2_4" and c.quantization not in ("none", "qat_int8", "fp8_training"):
        return "2:4 sparse weights cannot be quantized again; choose one of 2:4 sparsity and quantization"
    if c.quantization == "int4_weight_only" and c.precision != "bf16_full":
        return "torchao's int4 weight-only kernel takes bf16 weights: use it with precision bf16_full"
    return None


def refusal(config: Any, workload: str) -> str | None:
    """Why ``config`` cannot run as a ``workload`` ("train" / "inference") at all, whatever
    the hardware: an option for the other workload, knob values that cannot be combined,
    or a batch that does not split into the ranks' micro-batches. None when it can.
    The one check behind ``apply`` and the study's check of BASELINE."""
    values = config.to_dict()
    for key, technique in TECHNIQUES.items():
        reason = technique.wrong_workload(values[key], workload)
        if reason:
            return reason
    conflict = conflicts(config)
    if conflict:
        return conflict
    per_step = config.devices * config.grad_accumulation
    if config.batch_size % per_step:
        return (f"batch_size {config.batch_size} does not split evenly into devices={config.devices} "
                f"x grad_accumulation={config.grad_accumulation} micro-batches")
    return None


def plain_tensor(t: Any) -> bool:
    """A plain tensor or parameter, not a torchao quantized / sparse / DTensor subclass."""
    import torch

    return type(t) in (torch.Tensor, torch.nn.Parameter)


def _registry() -> dict[str, Technique]:
    from advisor.techniques.channels_last import ChannelsLast
    from advisor.techniques.compile import Compile, CompileMode
    from advisor.techniques.data import NumWorkers, PinMemory
    from advisor.techniques.memory import ActivationCheckpointing, GradAccumulation
    from advisor.techniques.parallelism import BucketMb, CommHook, Devices, Parallelism
    from advisor.techniques.precision import Precision
    from advisor.techniques.pruning import PruneAmount, Pruning
    from advisor.techniques.quantization import Quantization
    from advisor.techniques.threads import Threads

    techniques: list[Technique] = [
        Precision(), Threads(), ChannelsLast(), Compile(), CompileMode(),
        Parallelism(), Devices(), CommHook(), BucketMb(), Pruning(), PruneAmount(), Quantization(),
        ActivationCheckpointing(), GradAccumulation(), NumWorkers(), PinMemory(),
    ]
    return {t.key: t for t in sorted(techniques, key=lambda t: t.order)}


TECHNIQUES: dict[str, Technique] = _registry()

__all__ = ["TECHNIQUES", "Technique", "check_int", "conflicts", "plain_tensor", "refusal"]
