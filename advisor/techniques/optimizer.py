"""The optimizer's implementation: torch's fused kernel (one kernel for every parameter's
update, instead of a loop or a multi-tensor "foreach" pass), for an optimizer class that has
one (Adam, AdamW, SGD, Adagrad in torch 2.4+), with the user's hyperparameters unchanged.

The user's optimizer is built by their code (model.py's ``optimizer()``, a Lightning
module's ``configure_optimizers``); the knob switches that same object to its fused
implementation before its first step (``Prepared.train_step`` does it once per optimizer),
so schedulers and anything else holding it keep working.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from advisor.core.errors import UnsupportedError
from advisor.techniques._base import Technique

if TYPE_CHECKING:
    from advisor.machine.hardware import Hardware
    from advisor.techniques.prepared import Prepared


def has_fused(optimizer_class: type) -> bool:
    """Whether torch's class takes ``fused=`` (its constructor says so)."""
    try:
        return "fused" in inspect.signature(optimizer_class.__init__).parameters
    except (TypeError, ValueError):
        return False


class FusedOptimizer(Technique):
    key = "fused_optimizer"
    description = "the optimizer's fused implementation (one kernel for all parameters), same hyperparameters"
    train_only = (True,)

    def unavailable(self, value: Any, hw: Hardware) -> str | None:
        if not value:
            return None
        from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

        if hw.device not in _get_fused_kernels_supported_devices():
            return f"torch has no fused optimizer kernels for {hw.device} devices"
        return None

    def pointless(self, value: Any, facts: dict[str, Any]) -> str | None:
        if value and facts.get("optimizer_fused") is False:
            return (f"the workload's optimizer ({facts.get('optimizer_class')}) has no fused implementation in torch "
                    "(Adam, AdamW, SGD and Adagrad have)")
        return None

    def apply(self, value: Any, prepared: Prepared) -> None:
        if value:
            prepared.step.optimizer_setup.append(use_fused)

    def snippet(self, value: Any) -> str | None:
        if not value:
            return None
        return "optimizer = torch.optim.AdamW(params, lr=..., fused=True)  # your optimizer and settings, plus fused=True"


def use_fused(optimizer: Any) -> None:
    """Switch ``optimizer`` to torch's fused implementation before its first step, as if it
    had been built with ``fused=True`` (every hyperparameter as it is)."""
    name = type(optimizer).__name__
    if not has_fused(type(optimizer)) or "fused" not in optimizer.defaults:
        raise UnsupportedError(f"fused_optimizer: {name} has no fused implementation in torch "
                               "(Adam, AdamW, SGD and Adagrad have)")
    if any(optimizer.state.get(p) for group in optimizer.param_groups for p in group["params"]):
        raise UnsupportedError(f"fused_optimizer: {name} has already taken a step; it is switched before its first")
    for group in optimizer.param_groups:
        if group.get("differentiable"):
            raise UnsupportedError(f"fused_optimizer: {name} is differentiable=True, which fused kernels do not support")
        group["fused"], group["foreach"] = True, False
    optimizer.defaults["fused"], optimizer.defaults["foreach"] = True, False
    optimizer._step_supports_amp_scaling = True  # as torch's constructor sets it for fused=True (GradScaler)
    if hasattr(optimizer, "_need_device_dtype_check_for_fused"):  # SGD checks its parameters at the first step
        optimizer._need_device_dtype_check_for_fused = True


class CompileOptimizer(Technique):
    key = "compile_optimizer"
    description = ("torch.compile the optimizer's step too: with compile, the whole training step is compiled "
                   "(forward and its backward by compile, the update here)")
    train_only = (True,)

    def unavailable(self, value: Any, hw: Hardware) -> str | None:
        from advisor.techniques.compile import Compile

        return Compile().unavailable(True, hw) if value else None

    def preload(self, value: Any) -> tuple[str, ...]:
        from advisor.techniques.compile import INDUCTOR

        return (INDUCTOR,) if value else ()

    def apply(self, value: Any, prepared: Prepared) -> None:
        if value:
            prepared.step.optimizer_setup.append(compile_step)

    def snippet(self, value: Any) -> str | None:
        if not value:
            return None
        return ("optimizer.step = torch.compile(optimizer.step)  # PyTorch's compiled-optimizer recipe;\n"
                "# a learning rate that changes every step recompiles it: keep it a tensor (lr=torch.tensor(...))")


def compile_step(optimizer: Any) -> None:
    """Compile ``optimizer.step`` (the object's own; GradScaler and schedulers call it as
    before). A learning rate its scheduler changes as a Python float makes torch recompile
    the step (up to its cache limit, then it runs eager): what is measured is what the
    user's setup would do."""
    import torch

    optimizer.step = torch.compile(optimizer.step)
