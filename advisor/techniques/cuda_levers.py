"""Two CUDA settings of the process: cuDNN's autotuner (``cudnn_benchmark``: it times the
convolution algorithms for each new input shape and keeps the fastest, which pays off for
convolutional models with fixed shapes, and pairs with channels_last) and the caching
allocator's ``expandable_segments`` (segments that grow instead of new ones: less
fragmentation, so a larger batch fits). Neither means anything on a CPU.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from advisor.techniques._base import Technique

if TYPE_CHECKING:
    from advisor.machine.hardware import Hardware
    from advisor.techniques.prepared import Prepared


class CudnnBenchmark(Technique):
    key = "cudnn_benchmark"
    description = "cuDNN autotuning of convolution algorithms (torch.backends.cudnn.benchmark)"

    def applies(self, hw: Hardware) -> str | None:
        return None if hw.device == "cuda" else "cuDNN runs on NVIDIA GPUs; this node runs trials on its CPU"

    def unavailable(self, value: Any, hw: Hardware) -> str | None:
        return self.applies(hw) if value else None

    def pointless(self, value: Any, facts: dict[str, Any]) -> str | None:
        if value and facts.get("has_conv2d") is False:
            return "the model has no 2-D convolution for cuDNN to tune"
        return None

    def apply(self, value: Any, prepared: Prepared) -> None:
        import torch

        if prepared.device.type == "cuda":
            torch.backends.cudnn.benchmark = bool(value)

    def snippet(self, value: Any) -> str | None:
        return "torch.backends.cudnn.benchmark = True" if value else None


class ExpandableSegments(Technique):
    key = "expandable_segments"
    description = "CUDA caching allocator with expandable segments (less fragmentation: larger batches fit)"

    def applies(self, hw: Hardware) -> str | None:
        return None if hw.device == "cuda" else "the CUDA caching allocator is a GPU setting; this node runs trials on its CPU"

    def unavailable(self, value: Any, hw: Hardware) -> str | None:
        return self.applies(hw) if value else None

    def apply(self, value: Any, prepared: Prepared) -> None:
        if prepared.device.type == "cuda":
            set_expandable_segments(bool(value))

    def snippet(self, value: Any) -> str | None:
        if not value:
            return None
        return ('# before CUDA starts (first line of the script, or in the environment):\n'
                'os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"')


def set_expandable_segments(on: bool) -> None:
    """The allocator's setting for the segments it makes from now on. A trial sets it
    before its model is built; torch's public way is $PYTORCH_CUDA_ALLOC_CONF before CUDA
    starts, its runtime setter (used here) is private: where it has moved, the variable is
    set for this process's children and the setting is left as it was."""
    import os

    import torch

    setting = f"expandable_segments:{on}"
    try:
        torch.cuda.memory._set_allocator_settings(setting)
    except AttributeError:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = setting
