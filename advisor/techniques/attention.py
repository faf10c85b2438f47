"""The attention kernel of models that call ``torch.nn.functional.scaled_dot_product_attention``
(directly, or through nn.MultiheadAttention / nn.TransformerEncoder, or a transformers model
with its "sdpa" attention): torch picks one by itself; ``sdpa_backend`` pins it through
``torch.nn.attention.sdpa_kernel`` around the forward pass. Offered only when the preflight
saw the model call it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from advisor.techniques._base import Technique

if TYPE_CHECKING:
    from advisor.machine.hardware import Hardware
    from advisor.techniques.prepared import Prepared

BACKENDS = {"math": "MATH", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION"}
HALF_ONLY_ON_CUDA = ("flash", "cudnn")  # CUDA kernels that take fp16 / bf16 inputs only
HALF_PRECISIONS = ("bf16", "fp16", "bf16_full")  # attention runs in 16 bits (autocast, or bf16 weights)


def precision_conflict(backend: str, precision: str, device: str) -> str | None:
    """Why the pinned kernel ``backend`` cannot run at ``precision`` on a node whose trials
    run on ``device`` ("cuda" / "cpu"), though each is offered there; None when it can. On
    CUDA the flash and cuDNN kernels take fp16 / bf16 inputs only: in fp32 (TF32 too: the
    inputs stay fp32) torch has no kernel to run ("No available kernel", seen on an H100).
    torch's CPU flash kernel takes fp32."""
    if device != "cuda" or backend not in HALF_ONLY_ON_CUDA or precision in HALF_PRECISIONS:
        return None
    return (f"the CUDA {backend} attention kernel takes fp16 or bf16 inputs only: expected precision "
            f"{' / '.join(HALF_PRECISIONS)}, found precision={precision}, where attention runs in fp32 and "
            "torch has no kernel to run ('No available kernel')")


class SdpaBackend(Technique):
    key = "sdpa_backend"
    description = "scaled_dot_product_attention's kernel: torch's choice, math, flash, memory-efficient or cuDNN"

    def unavailable(self, value: Any, hw: Hardware) -> str | None:
        if value in ("default", "math"):
            return None
        if hw.device != "cuda":
            if value == "flash":
                return None  # torch has a CPU flash-attention kernel
            return f"the {value} attention kernel is a CUDA kernel; this node runs trials on its CPU"
        cap = hw.min_capability() or (0, 0)
        need = {"flash": (8, 0), "efficient": (5, 0), "cudnn": (9, 0)}[value]
        if cap < need:
            return f"the {value} attention kernel needs compute capability >= {need[0]}.{need[1]}; this machine has {hw.gpu_names()}"
        return None

    def pointless(self, value: Any, facts: dict[str, Any]) -> str | None:
        if value != "default" and facts.get("calls_sdpa") is False:
            return "the model does not call scaled_dot_product_attention (seen in the preflight's forward)"
        dropout = facts.get("sdpa_dropout") or 0.0
        if value == "flash" and facts.get("device") == "cpu" and facts.get("workload", "train") == "train" and dropout:
            return (f"torch's CPU flash-attention kernel has no attention dropout, and this model trains with "
                    f"dropout_p={dropout:g} ('No available kernel')")
        return None

    def apply(self, value: Any, prepared: Prepared) -> None:
        if value != "default":
            from torch.nn.attention import SDPBackend

            prepared.numerics.sdpa_backends = [getattr(SDPBackend, BACKENDS[value])]

    def snippet(self, value: Any) -> str | None:
        if value == "default":
            return None
        return ("from torch.nn.attention import SDPBackend, sdpa_kernel\n"
                f"with sdpa_kernel(SDPBackend.{BACKENDS[value]}):  # around forward (and the loss)\n"
                "    loss = loss_fn(model(x), y)")
