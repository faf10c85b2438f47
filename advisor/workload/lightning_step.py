"""A LightningModule inside advisor's trial loop: the module that runs its steps, the values
it logs, and what it may ask of its trainer.

- ``LightningStep`` wraps the LightningModule as Lightning's own strategies do: its
  forward is ``training_step`` in train mode and ``validation_step`` in eval mode, so DDP,
  FSDP and every other knob see one ``nn.Module`` whose forward is the step;
- ``Logs`` stands in for ``self.log`` / ``self.log_dict``: values are reduced over an epoch
  as Lightning reduces them (mean weighted by the batch size, or sum / max / min), a
  torchmetrics ``Metric`` is computed at the epoch's end;
- ``TrialTrainer`` answers what a LightningModule may ask ``self.trainer`` during a trial
  (``estimated_stepping_batches`` for a OneCycle schedule, ``max_epochs``, the epoch and
  step, ranks, the datamodule); anything else raises an AttributeError naming it.
"""

from __future__ import annotations

import functools
import math
from typing import Any

REDUCTIONS = {"mean": "mean", "avg": "mean", "sum": "sum", "max": "max", "min": "min"}


def lightning_step(lit: Any, logs: Logs) -> Any:
    """The trial's model: a ``LightningStep`` around ``lit`` (see ``_step_class``)."""
    return _step_class()(lit, logs)


@functools.cache
def _step_class() -> type:
    """The class, made once torch is imported (it is never imported at this module's top)."""
    from torch import nn

    class LightningStep(nn.Module):
        """The trial's model: forward(batch) runs the LightningModule's training_step (train
        mode; returns what it returns) or validation_step (eval mode; returns None, the logged
        values go to ``logs``). ``compile_target``: what torch.compile compiles (the module's
        forward, as Lightning compiles a module given to ``Trainer.fit``)."""

        def __init__(self, lit: Any, logs: Logs) -> None:
            super().__init__()
            self.lit = lit
            self.logs = logs
            self.train_index = 0
            self.val_index = 0

        @property
        def compile_target(self) -> Any:
            return self.lit

        def forward(self, batch: Any) -> Any:
            trainer = self.lit._trainer
            if self.training:
                if trainer is not None:
                    trainer.training, trainer.validating = True, False
                out = self.lit.training_step(batch, self.train_index)
                self.train_index += 1  # Lightning's batch_idx: one per dataloader (micro-)batch
                return out
            if trainer is not None:
                trainer.training, trainer.validating = False, True
            self.lit.validation_step(batch, self.val_index)
            self.val_index += 1
            return None

        def to(self, *args: Any, **kwargs: Any) -> Any:
            self.lit.to(*args, **kwargs)  # LightningModule.to also updates its .device / .dtype
            return self

    return LightningStep


class Logs:
    """What ``self.log`` receives during a trial. ``phase`` "train": values are kept only
    for the names in ``kept`` (a ReduceLROnPlateau monitor), Metrics to reset at the epoch's
    end; "val": every value, reduced at the end of the validation epoch."""

    def __init__(self) -> None:
        self.phase = "train"
        self.batch_size = 1
        self.kept: set[str] = set()
        self._values: dict[str, list[Any]] = {}  # name -> [reduction, total, weight]
        self._metrics: dict[str, Any] = {}

    def log(self, name: str, value: Any, *args: Any, reduce_fx: Any = "mean", batch_size: int | None = None,
            **kwargs: Any) -> None:
        if _is_metric(value):
            self._metrics[name] = value
            return
        if self.phase == "train" and name not in self.kept:
            return
        import torch

        reduction = _reduction(reduce_fx, name)
        if isinstance(value, torch.Tensor):
            value = value.detach().float().mean()  # stays on its device: no sync per step
        weight = batch_size if batch_size is not None else self.batch_size
        entry = self._values.get(name)
        if entry is None:
            self._values[name] = [reduction, value * weight if reduction == "mean" else value, weight]
        elif reduction == "mean":
            entry[1], entry[2] = entry[1] + value * weight, entry[2] + weight
        elif reduction == "sum":
            entry[1] = entry[1] + value
        else:
            pick = max if reduction == "max" else min
            entry[1] = pick(entry[1], value) if not isinstance(value, torch.Tensor) else (
                torch.maximum(entry[1], value) if reduction == "max" else torch.minimum(entry[1], value))

    def log_dict(self, dictionary: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        for name, value in dictionary.items():
            self.log(name, value, **kwargs)

    def start(self, phase: str) -> None:
        self.phase, self._values, self._metrics = phase, {}, {}

    def end(self) -> dict[str, float]:
        """The epoch's values (Metrics computed, then reset), and a fresh epoch."""
        out = {}
        for name, (reduction, total, weight) in self._values.items():
            out[name] = float(total / weight) if reduction == "mean" else float(total)
        for name, metric in self._metrics.items():
            if self.phase == "val":
                out[name] = float(metric.compute())
            metric.reset()
        self._values, self._metrics = {}, {}
        return out


def _is_metric(value: Any) -> bool:
    return all(callable(getattr(value, attr, None)) for attr in ("compute", "reset", "update"))


def _reduction(reduce_fx: Any, name: str) -> str:
    key = reduce_fx if isinstance(reduce_fx, str) else getattr(reduce_fx, "__name__", "")
    if key.lower() not in REDUCTIONS:
        raise ValueError(f"self.log({name!r}, ..., reduce_fx={reduce_fx!r}): advisor reduces with mean, sum, max "
                         "or min (Lightning's own choices)")
    return REDUCTIONS[key.lower()]


class TrialTrainer:
    """What ``self.trainer`` is inside a trial (attached with ``module.trainer = ...``).
    advisor's loop, not Lightning's, runs the steps; this answers the questions a
    LightningModule asks its trainer while it trains and validates."""

    PROVIDED = ("estimated_stepping_batches", "max_epochs", "max_steps", "current_epoch", "global_step",
                "accumulate_grad_batches", "num_devices", "world_size", "global_rank", "local_rank", "node_rank",
                "is_global_zero", "num_nodes", "training", "validating", "testing", "predicting",
                "sanity_checking", "datamodule", "logger", "loggers", "callback_metrics", "logged_metrics",
                "progress_bar_metrics", "num_training_batches", "optimizers", "lr_scheduler_configs",
                "precision", "fast_dev_run")

    def __init__(self, *, steps: int, train_size: int | None, batch_size: int, accumulation: int, rank: int, world: int,
                 precision: str, datamodule: Any) -> None:
        per_rank = max(1, batch_size // world)
        self.estimated_stepping_batches = steps  # optimizer steps of the study's training budget
        self.max_steps = steps
        if train_size is None:  # a stream: as Lightning's own trainer has it, no length, max_steps decides
            self.num_training_batches: float = math.inf
            self.max_epochs = -1
        else:
            self.num_training_batches = max(1, train_size // world // per_rank) * accumulation
            self.max_epochs = max(1, math.ceil(steps * batch_size / max(1, train_size)))
        self.current_epoch = 0
        self.global_step = 0
        self.accumulate_grad_batches = accumulation
        self.num_devices = self.world_size = world
        self.global_rank = self.local_rank = rank
        self.node_rank = 0
        self.num_nodes = 1
        self.is_global_zero = rank == 0
        self.training, self.validating = True, False
        self.testing = self.predicting = self.sanity_checking = False
        self.fast_dev_run = False
        self.datamodule = datamodule
        self.logger, self.loggers = None, []
        self.callback_metrics: dict[str, float] = {}
        self.logged_metrics = self.progress_bar_metrics = self.callback_metrics
        self.optimizers: list[Any] = []
        self.lr_scheduler_configs: list[Any] = []
        self.precision = precision

    def __getattr__(self, name: str) -> Any:  # only for what __init__ did not set
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"trainer.{name}: an advisor trial runs the LightningModule's steps in its own loop, without a "
            f"Lightning Trainer; what self.trainer provides there: {', '.join(self.PROVIDED)}")


LIGHTNING_PRECISION = {"fp32": "32-true", "tf32": "32-true", "bf16": "bf16-mixed", "fp16": "16-mixed",
                       "bf16_full": "bf16-true"}
