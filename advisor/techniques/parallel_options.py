"""The levers of one data-parallel strategy: DDP's static graph, gradients as bucket views
and SyncBatchNorm; FSDP2's mixed-precision policy and whether parameters are resharded
after forward. Each means something only under its strategy (``advisor.techniques.rules``
refuses the rest); ``advisor.techniques.parallelism`` reads them when it wraps the model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from advisor.techniques._base import Technique

if TYPE_CHECKING:
    from advisor.machine.hardware import Hardware

# knob -> the strategy it belongs to (and its value that changes nothing)
STRATEGY_OF = {"ddp_static_graph": ("ddp", False), "ddp_bucket_view": ("ddp", False), "sync_batchnorm": ("ddp", False),
               "fsdp_mixed_precision": ("fsdp", "none"), "fsdp_reshard": ("fsdp", True)}


class DdpStaticGraph(Technique):
    key = "ddp_static_graph"
    description = ("DDP static_graph: the same parameters are used every step, so DDP skips searching for unused "
                   "ones and can overlap more communication (and allows reentrant checkpointing)")
    train_only = (True,)
    order = 83

    def snippet(self, value: Any) -> str | None:
        return "model = DistributedDataParallel(model, static_graph=True)" if value else None


class DdpBucketView(Technique):
    key = "ddp_bucket_view"
    description = "DDP gradient_as_bucket_view: gradients are views into the all-reduce buckets (one copy fewer)"
    train_only = (True,)
    order = 84

    def snippet(self, value: Any) -> str | None:
        return "model = DistributedDataParallel(model, gradient_as_bucket_view=True)" if value else None


class SyncBatchnorm(Technique):
    key = "sync_batchnorm"
    description = "SyncBatchNorm under DDP: batch statistics over every rank's batch, not each rank's alone"
    train_only = (True,)
    order = 78  # before the model is wrapped

    def unavailable(self, value: Any, hw: Hardware) -> str | None:
        if value and hw.device != "cuda":
            return "SyncBatchNorm runs on GPUs only (torch refuses CPU tensors)"
        return None

    def pointless(self, value: Any, facts: dict[str, Any]) -> str | None:
        if value and facts.get("has_batchnorm") is False:
            return "the model has no BatchNorm layer"
        return None

    def snippet(self, value: Any) -> str | None:
        return "model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)  # before DDP" if value else None


class FsdpMixedPrecision(Technique):
    key = "fsdp_mixed_precision"
    description = ("FSDP2 MixedPrecisionPolicy: parameters all-gathered and computed in bf16, gradients reduced "
                   "in fp32 (the sharded fp32 weights stay the optimizer's)")
    train_only = ("bf16",)
    order = 85

    def unavailable(self, value: Any, hw: Hardware) -> str | None:
        from advisor.techniques.precision import Precision

        return Precision().unavailable("bf16", hw) if value == "bf16" else None  # bf16 where bf16 runs

    def snippet(self, value: Any) -> str | None:
        if value != "bf16":
            return None
        return ("from torch.distributed.fsdp import MixedPrecisionPolicy\n"
                "policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)\n"
                "for norm in batchnorm_layers: fully_shard(norm)  # BatchNorm stays fp32, in groups of its own\n"
                "fully_shard(block, mp_policy=policy)  # each block, then the model, with the same policy")


class FsdpReshard(Technique):
    key = "fsdp_reshard"
    description = ("FSDP2 reshard_after_forward: free the gathered parameters after forward (false keeps them "
                   "for backward: less communication, more memory)")
    order = 86

    def snippet(self, value: Any) -> str | None:
        return None if value else "fully_shard(block, reshard_after_forward=False)  # each block and the model"


def strategy_conflict(values: dict[str, Any], parallelism: str) -> str | None:
    """A strategy's lever set under another strategy, or None."""
    for key, (strategy, neutral) in STRATEGY_OF.items():
        if values.get(key, neutral) != neutral and parallelism != strategy:
            return f"{key}={values[key]!r} applies to {strategy.upper()}; parallelism is {parallelism}"
    return None
