"""Memory levers of the training step: activation checkpointing of the model's blocks
(``advisor.workload.structure.blocks``: its repeated layers, else its top-level
children), and gradient accumulation (the same global batch in smaller micro-batches)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from advisor.core.errors import UnsupportedError
from advisor.techniques._base import Technique
from advisor.workload.structure import blocks

if TYPE_CHECKING:
    from advisor.machine.hardware import Hardware
    from advisor.techniques.prepared import Prepared


class ActivationCheckpointing(Technique):
    key = "activation_checkpointing"
    description = "recompute each block's activations in backward instead of storing them"
    train_only = (True,)

    def pointless(self, value: Any, facts: dict[str, Any]) -> str | None:
        if value and facts.get("top_level_blocks", 2) < 2:
            return "the model has fewer than two blocks with parameters (repeated layers or top-level children): nothing to trade"
        return None

    def apply(self, value: Any, prepared: Prepared) -> None:
        if not value:
            return
        found = blocks(prepared.module)
        if len(found) < 2:
            raise UnsupportedError("activation checkpointing wraps the model's blocks (its repeated layers, else "
                                   f"its children with parameters); this model has {len(found)}")
        for block in found:
            _checkpoint_forward(block, prepared.numerics.sdpa_backends)

    def snippet(self, value: Any) -> str | None:
        if not value:
            return None
        return ("from torch.utils.checkpoint import checkpoint\n"
                "# in forward, for each block (each repeated layer, else each top-level child):\n"
                "x = checkpoint(self.block, x, use_reentrant=False)\n"
                "# BatchNorm in a block updates its running statistics again in the recomputation\n"
                "# (advisor.apply() freezes them there: checkpoint(..., context_fn=...)); a pinned attention\n"
                "# kernel (sdpa_kernel) must be pinned in the recomputation too, through the same context_fn")


def _checkpoint_forward(block: Any, sdpa_backends: Any = None) -> None:
    """Make ``block`` recompute its activations in backward (state_dict keys unchanged).

    The recomputation runs the block in training mode a second time, in backward, outside
    the step's forward contexts: under the attention kernels pinned for the forward pass
    (``sdpa_backends``; torch's own choice may be another kernel, whose saved tensors differ:
    "Recomputed values ... have different metadata"), and with its BatchNorm layers' running
    statistics frozen (updating them again would double their momentum and change what is
    evaluated).
    """
    from torch import is_grad_enabled
    from torch.compiler import is_compiling
    from torch.utils.checkpoint import checkpoint

    inner = block.forward

    def contexts() -> tuple[Any, Any]:
        return contextlib.nullcontext(), _recomputation(block, sdpa_backends)

    def forward(*args: Any, **kwargs: Any) -> Any:
        if block.training and is_grad_enabled():
            if is_compiling():  # compiled, the recomputation replays no buffer update (and
                # context_fn would have to be a pair of TorchDispatchModes)
                return checkpoint(inner, *args, use_reentrant=False, **kwargs)
            return checkpoint(inner, *args, use_reentrant=False, context_fn=contexts, **kwargs)
        return inner(*args, **kwargs)

    block.forward = forward


@contextlib.contextmanager
def _recomputation(block: Any, sdpa_backends: Any) -> Iterator[None]:
    """The contexts a checkpointed block's recomputation runs in (``_checkpoint_forward``)."""
    with contextlib.ExitStack() as stack:
        if sdpa_backends is not None:
            from torch.nn.attention import sdpa_kernel

            stack.enter_context(sdpa_kernel(sdpa_backends))
        stack.enter_context(_norm_stats_frozen(block))
        yield


@contextlib.contextmanager
def _norm_stats_frozen(block: Any) -> Iterator[None]:
    """BatchNorm layers of ``block`` leave their running statistics as they are: momentum
    0 (the running averages stay exactly put) and the batch counter restored after."""
    from torch import no_grad
    from torch.nn.modules.batchnorm import _BatchNorm

    norms = [m for m in block.modules() if isinstance(m, _BatchNorm) and m.track_running_stats]
    saved = [(m.momentum, m.num_batches_tracked.clone() if m.num_batches_tracked is not None else None)
             for m in norms]
    for m in norms:
        m.momentum = 0.0
    try:
        yield
    finally:
        with no_grad():
            for m, (momentum, count) in zip(norms, saved):
                m.momentum = momentum
                if count is not None:
                    m.num_batches_tracked.copy_(count)


class GradAccumulation(Technique):
    key = "grad_accumulation"
    description = "micro-steps per optimizer step (the global batch_size is split between them)"

    def candidate_values(self, hw: Hardware) -> list[Any]:
        return [1, 2, 4, 8]

    def wrong_workload(self, value: Any, workload: str) -> str | None:
        if workload == "inference" and value != 1:
            return f"grad_accumulation={value}: gradient accumulation only applies to training; this is an inference workload"
        return None

    def apply(self, value: Any, prepared: Prepared) -> None:
        prepared.step.accumulation = value

    def snippet(self, value: Any) -> str | None:
        if value == 1:
            return None
        return (f"for i, (x, y) in enumerate(zip(inputs.chunk({value}), targets.chunk({value}))):\n"
                f"    (loss_fn(model(x), y) / {value}).backward()  # DDP: under model.no_sync() but the last\n"
                "optimizer.step(); optimizer.zero_grad()")
