"""The typed records ``Prepared`` keeps its state in (advisor/techniques/prepared.py):
``Ranks``, ``Numerics`` and ``StepPlan``, the ``Staged`` protocol of a pipeline, and the
flat aliases kept for code written before them."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Protocol

if TYPE_CHECKING:
    import torch
    from torch.nn.attention import SDPBackend


class Staged(Protocol):
    """What ``Prepared`` and the trial call of a pipeline (``advisor.techniques.pipeline.Pipeline``)."""

    is_last: bool  # this rank runs the last stage: the outputs come out here

    def train_step(self, inputs: Any, target: Any, loss_fn: Callable[[Any, Any], Any]) -> Any: ...

    def predict(self, inputs: Any) -> Any: ...

    def from_last(self, value: float) -> float: ...


@dataclass(frozen=True)
class Ranks:
    """Where this process sits: ``rank`` of ``world`` processes (0 of 1 without
    parallelism), and which share of each batch it loads, ``dp_rank`` of ``dp_world`` (the
    data-parallel replicas: every rank under DDP / FSDP, one under TP / PP). Set by
    ``parallelism`` (then narrowed by TP and PP) with ``dataclasses.replace``."""

    rank: int = 0
    world: int = 1
    dp_rank: int = 0
    dp_world: int = 1


@dataclass
class Numerics:
    """The arithmetic and layout of forward + loss.

    Attributes:
        amp_dtype: autocast dtype, or None for no autocast.
        scaler: a GradScaler for fp16, else None.
        input_dtype: floating-point inputs are cast to it (bf16_full), else None.
        memory_format: ``torch.channels_last`` for 4-D inputs, else None.
        sdpa_backends: the attention kernels ``autocast()`` allows, or None for torch's choice.
        eval_with_no_grad: ``predict`` leaves ``torch.inference_mode`` for ``no_grad`` (fp8
            training's layers: under inference mode and autocast, torchao 0.18's float8
            tensors meet a dtype cast they do not implement).
    """

    amp_dtype: torch.dtype | None = None
    scaler: torch.amp.GradScaler | None = None
    input_dtype: torch.dtype | None = None
    memory_format: torch.memory_format | None = None
    sdpa_backends: list[SDPBackend] | None = None
    eval_with_no_grad: bool = False


@dataclass
class StepPlan:
    """How a training step runs, and what ends training.

    Attributes:
        accumulation: micro-steps per optimizer step.
        no_sync: context manager that skips the gradient all-reduce (DDP/FSDP), else None.
        pipeline: this rank's stages and schedule under pipeline parallelism, else None.
        optimizer_setup: run once on each optimizer ``train_step`` is given, before its first
            step (the fused implementation, the compiled step).
        finishers: run by ``finish()`` after training (pruning made permanent, QAT convert).
    """

    accumulation: int = 1
    no_sync: Callable[[], ContextManager[Any]] | None = None
    pipeline: Staged | None = None
    optimizer_setup: list[Callable[[torch.optim.Optimizer], None]] = field(default_factory=list)
    finishers: list[Callable[[], None]] = field(default_factory=list)


class Alias:
    """A flat attribute of ``Prepared`` kept for code written before the sub-records
    (``prepared.rank``, ``prepared.amp_dtype``, ...): reads and writes go to the record."""

    def __init__(self, record: str) -> None:
        self.record = record

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        return self if obj is None else getattr(getattr(obj, self.record), self.name)

    def __set__(self, obj: Any, value: Any) -> None:
        record = getattr(obj, self.record)
        if record.__dataclass_params__.frozen:  # replaced whole
            setattr(obj, self.record, replace(record, **{self.name: value}))
        else:
            setattr(record, self.name, value)
