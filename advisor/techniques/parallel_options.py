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

# knob -> the strategies it belongs to (and its value that changes nothing)
_FSDP = ("fsdp", "fsdp_tp")
STRATEGY_OF: dict[str, tuple[tuple[str, ...], Any]] = {
    "ddp_static_graph": (("ddp",), False), "ddp_bucket_view": (("ddp",), False), "sync_batchnorm": (("ddp",), False),
    "comm_hook": (("ddp",), "none"), "bucket_mb": (("ddp",), 25),
    "fsdp_mixed_precision": (_FSDP, "none"), "fsdp_reshard": (_FSDP, True),
    "tp_size": (("fsdp_tp",), 1),
    "pp_schedule": (("pp",), "1f1b"), "pp_microbatches": (("pp",), None), "pp_balance": (("pp",), "params"),
}


class DdpStaticGraph(Technique):
    key = "ddp_static_graph"
    read_by = "parallelism"
    description = ("DDP static_graph: the same parameters are used every step, so DDP skips searching for unused "
                   "ones and can overlap more communication (and allows reentrant checkpointing)")
    train_only = (True,)

    def snippet(self, value: Any) -> str | None:
        return "model = DistributedDataParallel(model, static_graph=True)" if value else None


class DdpBucketView(Technique):
    key = "ddp_bucket_view"
    read_by = "parallelism"
    description = "DDP gradient_as_bucket_view: gradients are views into the all-reduce buckets (one copy fewer)"
    train_only = (True,)

    def snippet(self, value: Any) -> str | None:
        return "model = DistributedDataParallel(model, gradient_as_bucket_view=True)" if value else None


class SyncBatchnorm(Technique):
    key = "sync_batchnorm"
    read_by = "parallelism"
    description = "SyncBatchNorm under DDP: batch statistics over every rank's batch, not each rank's alone"
    train_only = (True,)

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
    read_by = "parallelism"
    description = ("FSDP2 MixedPrecisionPolicy: parameters all-gathered and computed in bf16, gradients reduced "
                   "in fp32 (the sharded fp32 weights stay the optimizer's)")
    train_only = ("bf16",)

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
    read_by = "parallelism"
    description = ("FSDP2 reshard_after_forward: free the gathered parameters after forward (false keeps them "
                   "for backward: less communication, more memory)")

    def snippet(self, value: Any) -> str | None:
        return None if value else "fully_shard(block, reshard_after_forward=False)  # each block and the model"


def strategy_conflict(values: dict[str, Any], parallelism: str) -> str | None:
    """A strategy's lever set under another strategy, or None."""
    for key, (strategies, neutral) in STRATEGY_OF.items():
        if values.get(key, neutral) != neutral and parallelism not in strategies:
            names = " and ".join(_NAMES[s] for s in strategies)
            return f"{key}={values[key]} applies to {names}; parallelism is {parallelism}"
    return None


_NAMES = {"ddp": "DDP", "fsdp": "FSDP", "fsdp_tp": "FSDP on a 2-D mesh (fsdp_tp)", "pp": "pipeline parallelism (pp)"}


class TpSize(Technique):
    key = "tp_size"
    read_by = "parallelism"
    description = ("ranks in each tensor-parallel group of a 2-D mesh (parallelism fsdp_tp): FSDP2 runs across the "
                   "devices / tp_size groups, tensor parallelism inside each")

    def candidate_values(self, hw: Hardware) -> list[Any]:
        from advisor.techniques.parallelism import trial_devices

        n, values, k = trial_devices(hw), [1], 2
        while 2 * k <= n:  # at least two FSDP groups
            values.append(k)
            k *= 2
        return values

    def applies(self, hw: Hardware) -> str | None:
        from advisor.techniques.parallelism import trial_devices

        if trial_devices(hw) < 4:
            return f"a 2-D mesh needs at least 4 devices (2 groups of 2); this node has {trial_devices(hw)}"
        return None

    def unavailable(self, value: Any, hw: Hardware) -> str | None:
        from advisor.techniques.parallelism import trial_devices

        if value > 1 and 2 * value > trial_devices(hw):
            return f"tp_size={value} leaves fewer than 2 FSDP groups on this node's {trial_devices(hw)} devices"
        return None

    def snippet(self, value: Any) -> str | None:
        return None if value == 1 else f"TP_SIZE = {value}  # see parallelism=fsdp_tp"


class PpSchedule(Technique):
    key = "pp_schedule"
    read_by = "parallelism"
    description = ("pipeline schedule: gpipe (every micro-batch forward, then every backward), 1f1b (one forward, "
                   "one backward: fewer activations held), interleaved_1f1b (two stages per rank: a smaller bubble)")
    train_only = ("gpipe", "interleaved_1f1b")

    def pointless(self, value: Any, facts: dict[str, Any]) -> str | None:
        units = facts.get("pipeline_units", 4)
        if value == "interleaved_1f1b" and units < 4:
            return (f"interleaved 1F1B runs two stages on each rank, 4 or more for 2 ranks, and the model can be "
                    f"cut into {units} (its blocks, or pipeline_split() in model.py)")
        return None

    def snippet(self, value: Any) -> str | None:
        name = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B", "interleaved_1f1b": "ScheduleInterleaved1F1B"}[value]
        return f"schedule = torch.distributed.pipelining.{name}(stage, n_microbatches=MICROBATCHES, loss_fn=loss_fn)"


class PpMicrobatches(Technique):
    key = "pp_microbatches"
    read_by = "parallelism"
    description = "micro-batches the pipeline splits each batch into (null: one per stage)"

    def candidate_values(self, hw: Hardware) -> list[Any]:
        return [None, 2, 4, 8]

    def wrong_workload(self, value: Any, workload: str) -> str | None:
        if workload == "inference" and value is not None:
            return f"{self.key}={value!r} only applies to training; this is an inference workload"
        return None

    def snippet(self, value: Any) -> str | None:
        return None if value is None else f"MICROBATCHES = {value}  # see pp_schedule"


class PpBalance(Technique):
    key = "pp_balance"
    read_by = "parallelism"
    description = ("how the pipeline's stages are balanced: by the parameter count of the layers each holds, or by "
                   "their forward time measured on the first rank")
    train_only = ("time",)

    def snippet(self, value: Any) -> str | None:
        return ("# the stages advisor chose are in the trial's telemetry.model.pipeline.cuts: cut there\n"
                "pipe = torch.distributed.pipelining.pipeline(model, mb_args=(micro_batch,), "
                "split_spec={name: SplitPoint.BEGINNING for name in cuts})")
