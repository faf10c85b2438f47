"""torch.compile, and its mode (a conditional knob: only sampled when compile is on)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from advisor.techniques._base import Technique

if TYPE_CHECKING:
    from advisor.machine.hardware import Hardware
    from advisor.techniques.prepared import Prepared

INDUCTOR = "torch._inductor:compile_fx"  # what torch.compile imports at its first call (~0.8 s on a CPU)


class Compile(Technique):
    key = "compile"
    description = "torch.compile the model (compile time is recorded apart from throughput)"

    def unavailable(self, value: Any, hw: Hardware) -> str | None:
        if not value:
            return None
        import torch._dynamo

        if not torch._dynamo.is_dynamo_supported():
            return "torch.compile does not support this Python version"
        if hw.device == "cpu" and not hw.compiler:
            return "torch.compile on CPU needs a C++ compiler (c++, g++ or clang++) on PATH; none found"
        if hw.device == "cuda" and not hw.triton:
            return "torch.compile on GPU needs triton, which is not installed"
        return None

    def preload(self, value: Any) -> tuple[str, ...]:
        return (INDUCTOR,) if value else ()

    def apply(self, value: Any, prepared: Prepared) -> None:
        import torch

        if not value:
            return
        mode = prepared.config.compile_mode
        mode = None if mode == "default" else mode
        dynamic = None  # torch's default: static first, dynamic shapes once a size changes
        if prepared.numerics.amp_dtype is not None and _has_mha(prepared.module):
            # Two torch 2.13 failures of nn.MultiheadAttention compiled under autocast, found by
            # benchmarks/combinations.py. (1) The graph called the encoder layers' fused inference
            # kernel (the "fast path") with 16-bit activations and fp32 weights: "expected m1 and
            # m2 to have the same dtype"; the layers' own path is taken instead. (2) On a CPU,
            # max-autotune's code for attention's batched matmuls, recompiled for a smaller last
            # batch with dynamic shapes, mixed a dynamic and a fixed batch size ("Expected size for
            # first two dimensions of batch2 tensor"); it recompiles for each size instead.
            torch.backends.mha.set_fastpath_enabled(False)
            prepared.stats["mha_fastpath"] = "off: compiled under autocast, the fused kernel mixes dtypes"
            if mode and mode.startswith("max-autotune") and prepared.device.type == "cpu":
                dynamic = False
                prepared.stats["compile_dynamic"] = False
        target = getattr(prepared.module, "compile_target", None)
        if target is not None:  # a LightningModule in its step: its forward, as Lightning compiles it
            target.forward = torch.compile(target.forward, mode=mode, dynamic=dynamic)
        else:
            prepared.model = torch.compile(prepared.model, mode=mode, dynamic=dynamic)  # the DDP wrapper, if any
        prepared.compiled = True

    def snippet(self, value: Any) -> str | None:
        return "model = torch.compile(model)" if value else None


def _has_mha(module: Any) -> bool:
    """Whether ``module`` holds torch's attention layers (with their fused inference "fast path")."""
    import torch.nn as nn

    return any(isinstance(m, (nn.TransformerEncoderLayer, nn.MultiheadAttention)) for m in module.modules())


class CompileMode(Technique):
    key = "compile_mode"
    read_by = "compile"
    description = "torch.compile mode (used only when compile is true)"

    def unavailable(self, value: Any, hw: Hardware) -> str | None:
        if value in ("reduce-overhead", "max-autotune") and hw.device != "cuda":
            return f"mode {value!r} uses CUDA graphs, which need a CUDA GPU"
        return None

    def snippet(self, value: Any) -> str | None:
        return None if value == "default" else f"model = torch.compile(model, mode={value!r})"
