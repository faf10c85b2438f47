"""channels_last memory format for convolutional models (NHWC)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from advisor.core.errors import UnsupportedError
from advisor.techniques._base import Technique

if TYPE_CHECKING:
    from advisor.techniques.prepared import Prepared


class ChannelsLast(Technique):
    key = "channels_last"
    description = "NHWC memory format for the model and its 4-D inputs"

    def pointless(self, value: Any, facts: dict[str, Any]) -> str | None:
        if value and facts.get("has_conv2d") is False:
            return "the model has no 2-D convolutions, so the memory format changes nothing"
        return None

    def apply(self, value: Any, prepared: Prepared) -> None:
        import torch

        if not value:
            return
        if not any(isinstance(m, torch.nn.Conv2d) for m in prepared.module.modules()):
            raise UnsupportedError("channels_last needs a model with 2-D convolutions; this one has none")
        # Module.to takes memory_format at run time; torch's stubs do not list it
        prepared.module.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        prepared.numerics.memory_format = torch.channels_last

    def snippet(self, value: Any) -> str | None:
        if not value:
            return None
        return ("model = model.to(memory_format=torch.channels_last)\n"
                "x = x.to(memory_format=torch.channels_last)  # each 4-D input batch")
