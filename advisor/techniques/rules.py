"""The rules that hold between knobs and around them: which values cannot be combined
(anywhere, or on the device trials run on), which cannot run as a workload at all, and
which this hardware offers (with the reason for each refusal). The study checks them before
a trial is submitted, ``apply`` before it touches a model, ``advisor doctor`` before it
plans a run, and ``advisor hardware`` prints the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from advisor.core.config import TrialConfig
from advisor.core.results import WORKLOADS
from advisor.machine.hardware import Hardware
from advisor.techniques.attention import precision_conflict
from advisor.techniques.model_parallel import model_parallel_conflict
from advisor.techniques.parallel_options import strategy_conflict
from advisor.techniques.registry import TECHNIQUES


def conflicts(config: TrialConfig) -> str | None:
    """Why these knob values cannot be combined (each is fine alone), or None.

    Checked by ``apply`` and by the study before a trial is submitted, so a combination
    that cannot work is recorded as ``unsupported`` without spending a trial on it.
    """
    c = config
    if c.parallelism != "single" and c.devices < 2:
        return f"parallelism {c.parallelism} runs over several ranks: it needs devices >= 2, found devices={c.devices}"
    if c.parallelism == "single" and c.devices != 1:
        return f"devices={c.devices} needs a parallelism over several ranks (parallelism is single)"
    lever = strategy_conflict(c.to_dict(), c.parallelism) or model_parallel_conflict(c)
    if lever:
        return lever
    if c.fp8_scaling != "tensorwise" and c.quantization not in ("fp8_training", "fp8"):
        return f"fp8_scaling={c.fp8_scaling} applies to fp8 quantization; quantization is {c.quantization}"
    if c.compile and c.activation_checkpointing and c.sdpa_backend != "default":
        return (f"activation checkpointing under torch.compile recomputes its blocks without the pinned attention "
                f"kernel (sdpa_backend={c.sdpa_backend}), and the recomputation fails (CheckpointError: "
                "different metadata); with compile, pin the kernel or checkpoint, not both")
    if c.ddp_static_graph and c.grad_accumulation > 1:
        return ("DDP static_graph with gradient accumulation (no_sync) fails inside torch 2.13's reducer "
                "(INTERNAL ASSERT expect_autograd_hooks_); use one of them")
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


def device_conflicts(config: TrialConfig, device: str) -> str | None:
    """Why these knob values cannot be combined where trials run on ``device`` ("cuda" or
    "cpu"), though the hardware offers each of them (``Technique.unavailable`` judges values
    one at a time); None when they can. Today: the CUDA flash and cuDNN attention kernels
    take fp16 / bf16 only."""
    return precision_conflict(config.sdpa_backend, config.precision, device)


def refusal(config: TrialConfig, workload: str, device: str | None = None) -> str | None:
    """Why ``config`` cannot run as a ``workload`` ("train" / "inference"): an option for
    the other workload, knob values that cannot be combined (anywhere, or with ``device``,
    the device type trials run on, when given), or a batch that does not split into the
    ranks' micro-batches. None when it can. The one check behind ``apply``, the study's
    check of BASELINE and of each configuration it would run, and the doctor's runs."""
    values = config.to_dict()
    for key, technique in TECHNIQUES.items():
        reason = technique.wrong_workload(values[key], workload)
        if reason:
            return reason
    conflict = conflicts(config) or (device_conflicts(config, device) if device is not None else None)
    if conflict:
        return conflict
    ranks = config.data_ranks()
    per_step = ranks * config.grad_accumulation
    if config.batch_size % per_step:
        split = f"devices={config.devices}" if ranks == config.devices else f"{ranks} data-parallel groups"
        return (f"batch_size {config.batch_size} does not split evenly into {split} "
                f"x grad_accumulation={config.grad_accumulation} micro-batches")
    return None


@dataclass(frozen=True)
class Capability:
    """Whether one option (``key`` = ``value``) is offered on this hardware, and why not."""

    key: str
    value: Any
    available: bool
    reason: str = ""
    workloads: str = "train, inference"  # which workloads the option is for


def capability_table(hw: Hardware, keys: list[str] | None = None) -> list[Capability]:
    """Every option of every technique, marked available or refused with a reason."""
    rows = []
    for key, tech in TECHNIQUES.items():
        if keys is not None and key not in keys:
            continue
        for value in tech.candidate_values(hw):
            reason = tech.unavailable(value, hw)
            workloads = ", ".join(w for w in WORKLOADS if tech.wrong_workload(value, w) is None)
            rows.append(Capability(key, value, reason is None, reason or "", workloads))
    return rows
