"""The GPU check's knob tables (benchmarks/gpu/knobs.py): for each table, each model's
variants, measured against the model's fp32 baseline."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Group:
    """One model's baseline and the knobs measured against it."""

    model: str  # a file of benchmarks/gpu/models/, without .py
    workload: str  # train or inference
    variants: tuple[dict, ...]
    baseline: tuple[tuple[str, object], ...] = ()  # changes to the model's BASELINE


def _bf16(**more) -> dict:
    return {"precision": "bf16", **more}


# In each table the models whose runs are quickest come first: a part stopped at its limit
# has then measured them all, and the slow model as far as it got.
TABLES: dict[str, tuple[Group, ...]] = {
    "train": (
        Group("conv_net", "train", (
            {"channels_last": True}, _bf16(), _bf16(channels_last=True), {"cudnn_benchmark": True},
            _bf16(channels_last=True, cudnn_benchmark=True), {"activation_checkpointing": True},
        )),
        Group("wide_mlp", "train", (
            _bf16(), _bf16(compile=True), _bf16(compile=True, quantization="fp8_training", fp8_scaling="tensorwise"),
            _bf16(compile=True, quantization="fp8_training", fp8_scaling="rowwise"),
            {"quantization": "fp8_training", "fp8_scaling": "tensorwise", "compile": True},
        )),
        Group("gpt2_small", "train", (
            {"precision": "tf32"}, _bf16(), {"precision": "fp16"}, {"fused_optimizer": True},
            _bf16(fused_optimizer=True), _bf16(sdpa_backend="math"), _bf16(sdpa_backend="flash"),
            _bf16(sdpa_backend="efficient"), _bf16(sdpa_backend="cudnn"), {"cudnn_benchmark": True},
            {"expandable_segments": True}, {"activation_checkpointing": True},
            _bf16(activation_checkpointing=True),
        )),
    ),
    "compile": (
        # conv_net first: its compiles take seconds, GPT-2's ~35 s each (the H200's tune part);
        # max-autotune (minutes of autotuning a run) last, where a stopped round leaves it out
        Group("conv_net", "train", (
            {"compile": True}, {"compile": True, "compile_mode": "reduce-overhead"}, _bf16(compile=True),
            _bf16(compile=True, compile_mode="reduce-overhead"), _bf16(compile=True, compile_optimizer=True),
            _bf16(compile=True, compile_mode="max-autotune-no-cudagraphs"),
        )),
        Group("gpt2_small", "train", (
            _bf16(compile=True), _bf16(compile=True, compile_mode="reduce-overhead"),
            {"compile": True, "compile_mode": "max-autotune"},
        )),
    ),
    "inference": (
        Group("gpt2_small", "inference", (
            {"precision": "tf32"}, _bf16(), {"precision": "bf16_full"}, {"quantization": "int8_weight_only"},
            {"quantization": "int8_dynamic"}, {"precision": "bf16_full", "quantization": "int4_weight_only"},
            {"quantization": "fp8"}, {"quantization": "fp8", "fp8_scaling": "rowwise"},
            {"precision": "bf16_full", "pruning": "semi_structured_2_4"},
            {"precision": "bf16_full", "compile": True},
            {"precision": "bf16_full", "quantization": "int8_weight_only", "compile": True},
        ), baseline=(("batch_size", 32),)),
    ),
}
