"""Parallelism inside one trial: data parallel (DDP or FSDP2 over ``devices`` ranks, and
DDP's communication levers: gradient compression hook, bucket size) and model parallel
(tensor, pipeline, 2-D: ``advisor.techniques.model_parallel`` and ``pipeline``).

A trial with ``devices`` > 1 runs one process per rank, launched the way ``torchrun`` does
(RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT in the environment); ``apply`` joins the
process group from that environment, so an exported config works under
``torchrun --nproc-per-node=K`` unchanged. NCCL on GPUs, gloo on CPU (cores split between
the ranks).
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from advisor.core.errors import UnsupportedError
from advisor.techniques import model_parallel
from advisor.techniques._base import Technique
from advisor.techniques.records import Ranks
from advisor.workload.structure import blocks, tied_parameters

if TYPE_CHECKING:
    from advisor.machine.hardware import Hardware
    from advisor.techniques.prepared import Prepared

# A rank waits at most this long in a collective for the others (a dead rank must not hang
# the trial: the trial timeout kills everything anyway, this makes the error readable).
DIST_TIMEOUT_S = float(os.environ.get("ADVISOR_DIST_TIMEOUT", "300"))


def device_count(hw: Hardware) -> int:
    """How many ranks a trial can use on this node: GPUs, or CPU cores (one each at least)."""
    return len(hw.gpus) if hw.device == "cuda" else hw.cpu.cores


def trial_devices(hw: Hardware) -> int:
    """How many ranks a trial can have: this node's, or a Ray cluster's over its nodes (a
    trial wider than a node is placed on several: advisor/runner/placement.py)."""
    return max(device_count(hw), hw.cluster_devices)


class Parallelism(Technique):
    key = "parallelism"
    description = ("single device; data parallel: DDP or FSDP2 (fully_shard) over `devices` ranks; model parallel: "
                   "tensor (tp), pipeline (pp), or FSDP2 over tensor-parallel groups (fsdp_tp)")
    train_only = ("ddp", "fsdp", "tp", "pp", "fsdp_tp")

    def applies(self, hw: Hardware) -> str | None:
        if trial_devices(hw) < 2:
            unit = "GPUs" if hw.device == "cuda" else "CPU cores"
            return f"data parallelism needs at least 2 devices; this node has {device_count(hw)} {unit.rstrip('s') if device_count(hw) == 1 else unit}"
        return None

    def unavailable(self, value: Any, hw: Hardware) -> str | None:
        if value == "single":
            return None
        if value == "fsdp_tp" and trial_devices(hw) < 4:
            return (f"FSDP over tensor-parallel groups needs a 2-D mesh of at least 4 devices (2 groups of 2); this "
                    f"node has {device_count(hw)}")
        return self.applies(hw)

    def pointless(self, value: Any, facts: dict[str, Any]) -> str | None:
        if value in model_parallel.TP_STRATEGIES and facts.get("tp_refusal"):
            return str(facts["tp_refusal"])
        if value == "pp" and facts.get("pipeline_units", 2) < 2:
            return facts.get("pipeline_refusal") or (
                "a pipeline cuts the model between its blocks (repeated layers, else top-level children with "
                "parameters) and this model has fewer than two; pipeline_split() in model.py can name where")
        return None

    def preload(self, value: Any) -> tuple[str, ...]:
        return ("torch.export:_trace",) if value == "pp" else ()  # a pipeline's split traces the model (~0.2-0.7 s)

    def apply(self, value: Any, prepared: Prepared) -> None:
        devices = prepared.config.devices
        if value == "single":
            if devices != 1:
                raise UnsupportedError(f"devices={devices} needs a parallelism over several ranks (parallelism is single)")
            return
        if devices < 2:
            raise UnsupportedError(f"parallelism {value} needs devices >= 2, found devices={devices}")
        if value == "pp":
            from advisor.techniques.pipeline import check_units

            check_units(prepared)  # before any rank waits for the others
        dist = _join_process_group(prepared, devices)
        rank, world = dist.get_rank(), dist.get_world_size()
        prepared.ranks = Ranks(rank, world, dp_rank=rank, dp_world=world)  # TP and PP narrow the data-parallel share
        if value == "ddp":
            _wrap_ddp(prepared)
        elif value == "fsdp":
            _shard_fsdp(prepared)
        elif value == "tp":
            model_parallel.apply_tp(prepared)
        elif value == "fsdp_tp":
            model_parallel.apply_fsdp_tp(prepared, _shard_fsdp)
        else:
            from advisor.techniques.pipeline import apply_pp

            apply_pp(prepared)

    def snippet(self, value: Any) -> str | None:
        if value in model_parallel.MODEL_PARALLEL:
            return model_parallel.snippet(value)
        if value == "ddp":
            return ("# launch: torchrun --nproc-per-node=K train.py\n"
                    "torch.distributed.init_process_group()  # nccl on GPUs, gloo on CPU\n"
                    "model = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=BUCKET_MB)\n"
                    "sampler = torch.utils.data.DistributedSampler(train_set)  # per-rank batch = batch_size / K")
        if value == "fsdp":
            return ("# launch: torchrun --nproc-per-node=K train.py\n"
                    "torch.distributed.init_process_group()\n"
                    "from torch.distributed.fsdp import fully_shard\n"
                    "# each block (a transformer's layers, else the top-level children), then the root;\n"
                    "# a block holding a tied weight is left to the root\n"
                    "for block in blocks: fully_shard(block)\n"
                    "fully_shard(model)")
        return None


def _join_process_group(prepared: Prepared, devices: int) -> Any:
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
            raise UnsupportedError(
                f"parallelism {prepared.config.parallelism} runs one process per device: launch this script with "
                f"`torchrun --nproc-per-node={devices} script.py` (advisor's trials launch their ranks themselves)")
        if prepared.device.type == "cuda":
            torch.cuda.set_device(prepared.device)
        backend = "nccl" if prepared.device.type == "cuda" else "gloo"
        dist.init_process_group(backend, timeout=timedelta(seconds=DIST_TIMEOUT_S))
    if dist.get_world_size() != devices:
        raise UnsupportedError(f"the config asks for devices={devices} but {dist.get_world_size()} processes were launched")
    return dist


def _wrap_ddp(prepared: Prepared) -> None:
    from torch.nn.parallel import DistributedDataParallel

    cfg = prepared.config
    device_ids = [prepared.device.index] if prepared.device.type == "cuda" else None
    if cfg.sync_batchnorm:  # batch statistics over all ranks (GPU only: torch refuses CPU tensors)
        import torch

        prepared.module = prepared.model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(prepared.module)
    ddp = DistributedDataParallel(prepared.module, device_ids=device_ids, bucket_cap_mb=cfg.bucket_mb,
                                  gradient_as_bucket_view=cfg.ddp_bucket_view, static_graph=cfg.ddp_static_graph)
    prepared.stats["ddp_bucket_cap_mb"] = ddp.bucket_bytes_cap / 2**20
    if cfg.comm_hook != "none":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        hook = {"fp16": default_hooks.fp16_compress_hook, "bf16": default_hooks.bf16_compress_hook}[cfg.comm_hook]
        ddp.register_comm_hook(state=None, hook=hook)
        prepared.stats["ddp_comm_hook"] = hook.__name__
    prepared.model = ddp
    prepared.eval_model = prepared.module
    prepared.step.no_sync = ddp.no_sync


def _shard_fsdp(prepared: Prepared, mesh: Any = None) -> None:
    """FSDP2 over every rank, or over ``mesh`` (the FSDP dimension of a 2-D mesh)."""
    import contextlib

    from torch.distributed.fsdp import fully_shard

    module: Any = prepared.module  # an FSDPModule once sharded (set_requires_gradient_sync)
    cfg = prepared.config
    mesh = mesh or model_parallel.device_mesh(prepared.device.type, (prepared.ranks.world,), ("dp",))
    options: dict[str, Any] = {"reshard_after_forward": cfg.fsdp_reshard, "mesh": mesh}
    norms: list[Any] = []
    if cfg.fsdp_mixed_precision == "bf16":
        import torch
        from torch.distributed.fsdp import MixedPrecisionPolicy

        options["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        # BatchNorm stays fp32 in groups of its own (it takes bf16 inputs; bf16 weights beside
        # its fp32 running statistics are refused by torch)
        norms = [m for m in module.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
        for norm in norms:
            fully_shard(norm, reshard_after_forward=cfg.fsdp_reshard, mesh=mesh)
    for unit in [u for u in fsdp_units(module) if not any(u is n for n in norms)]:
        fully_shard(unit, **options)
    fully_shard(module, **options)

    @contextlib.contextmanager
    def no_sync() -> Any:
        module.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            module.set_requires_gradient_sync(True)

    prepared.step.no_sync = no_sync


def fsdp_units(module: Any) -> list[Any]:
    """The blocks FSDP shards one by one before the root (which takes the rest): the model's
    blocks (``advisor.workload.structure.blocks``) that train, except any holding a tied
    parameter (a tied parameter must sit in one FSDP group: it stays with the root)."""
    tied = tied_parameters(module)
    return [b for b in blocks(module)
            if any(p.requires_grad for p in b.parameters()) and not any(id(p) in tied for p in b.parameters())]


class Devices(Technique):
    key = "devices"
    read_by = "parallelism"
    description = "ranks of a DDP / FSDP trial: GPUs, or CPU processes sharing the cores"

    def candidate_values(self, hw: Hardware) -> list[Any]:
        n, values = trial_devices(hw), []
        k = 2
        while k < n:
            values.append(k)
            k *= 2
        return [1] + values + ([n] if n >= 2 else [])

    def wrong_workload(self, value: Any, workload: str) -> str | None:
        if workload == "inference" and value != 1:
            return f"devices={value}: inference trials run one replica (scale out by running replicas side by side)"
        return None

    def applies(self, hw: Hardware) -> str | None:
        return Parallelism().applies(hw)

    def unavailable(self, value: Any, hw: Hardware) -> str | None:
        n = trial_devices(hw)
        if value > n:
            unit = "GPUs" if hw.device == "cuda" else "CPU cores"
            where = f"the Ray cluster has {n} {unit} over its nodes" if hw.cluster_devices else f"this node has {n} {unit}"
            return where
        return None


class CommHook(Technique):
    key = "comm_hook"
    read_by = "parallelism"
    description = "DDP gradient compression before all-reduce (none, fp16, bf16)"
    train_only = ("fp16", "bf16")

    def unavailable(self, value: Any, hw: Hardware) -> str | None:
        if value == "bf16" and hw.device != "cuda":
            return "the bf16 compression hook needs NCCL >= 2.10 on CUDA GPUs; gloo on CPU refuses it"
        return None

    def snippet(self, value: Any) -> str | None:
        if value == "none":
            return None
        return ("from torch.distributed.algorithms.ddp_comm_hooks import default_hooks\n"
                f"model.register_comm_hook(state=None, hook=default_hooks.{value}_compress_hook)")


class BucketMb(Technique):
    key = "bucket_mb"
    read_by = "parallelism"
    description = "DDP gradient bucket size in MiB (bucket_cap_mb; torch's default is 25)"

    def candidate_values(self, hw: Hardware) -> list[Any]:
        return [1, 5, 25, 100]
