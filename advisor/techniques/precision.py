"""Numeric precision: strict fp32, TF32 matmuls, bf16 or fp16 autocast (AMP), and for
inference ``bf16_full`` (weights and inputs stored in bf16, no autocast)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from advisor.techniques._base import Technique

if TYPE_CHECKING:
    from advisor.machine.hardware import Hardware
    from advisor.techniques.prepared import Prepared

AMPERE = (8, 0)


class Precision(Technique):
    key = "precision"
    description = "numeric precision of the training step"
    inference_only = ("bf16_full",)

    def unavailable(self, value: Any, hw: Hardware) -> str | None:
        if value == "fp32":
            return None
        if hw.device == "cpu":
            if value == "tf32":
                return "TF32 is a tensor-core format of NVIDIA GPUs (compute capability >= 8.0); this machine has no CUDA GPU"
            if value in ("bf16", "bf16_full") and not hw.cpu.native_bf16:
                return "this CPU has no native bf16 instructions (avx512_bf16 or amx_bf16); bf16 would be emulated and slow"
            if value == "fp16" and not hw.cpu.native_fp16:
                return "this CPU has no native fp16 arithmetic (avx512_fp16 or amx_fp16); fp16 autocast falls back to very slow kernels"
            return None
        cap = hw.min_capability()
        if value in ("tf32", "bf16", "bf16_full") and cap is not None and cap < AMPERE:
            return f"{value} needs compute capability >= 8.0 (Ampere); this machine has {hw.gpu_names()}"
        return None

    def apply(self, value: Any, prepared: Prepared) -> None:
        import torch

        if prepared.device.type == "cuda":
            # "fp32" means strict fp32: cuDNN would otherwise use TF32 for convolutions. Under
            # bf16 / fp16 autocast TF32 stays off too, on purpose: autocast already runs matmuls
            # and convolutions in 16 bits; the ones left in fp32 are those autocast keeps there
            # for precision (its fp32 op list) or that the model runs with autocast disabled,
            # and TF32 would quietly undo that choice for a negligible share of the time.
            torch.backends.cuda.matmul.allow_tf32 = value == "tf32"
            torch.backends.cudnn.allow_tf32 = value == "tf32"
        if value == "bf16":
            prepared.numerics.amp_dtype = torch.bfloat16
        elif value == "fp16":
            prepared.numerics.amp_dtype = torch.float16
            prepared.numerics.scaler = torch.amp.GradScaler(prepared.device.type)
        elif value == "bf16_full":
            prepared.module.to(torch.bfloat16)
            prepared.numerics.input_dtype = torch.bfloat16

    def snippet(self, value: Any) -> str | None:
        if value == "tf32":
            return ("torch.backends.cuda.matmul.allow_tf32 = True\n"
                    "torch.backends.cudnn.allow_tf32 = True")
        if value == "bf16":
            return ("with torch.autocast(device_type, dtype=torch.bfloat16):\n"
                    "    loss = loss_fn(model(x), y)")
        if value == "fp16":
            return ("scaler = torch.amp.GradScaler(device_type)\n"
                    "with torch.autocast(device_type, dtype=torch.float16):\n"
                    "    loss = loss_fn(model(x), y)\n"
                    "scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update()")
        if value == "bf16_full":
            return ("model = model.to(torch.bfloat16).eval()\n"
                    "x = x.to(torch.bfloat16)  # each floating-point input batch")
        return None
