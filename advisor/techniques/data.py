"""Data loading: DataLoader worker processes, and pinned host memory for GPU copies.
Loading the next batch is part of the measured training step."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from advisor.techniques._base import Technique

if TYPE_CHECKING:
    from advisor.machine.hardware import Hardware
    from advisor.techniques.prepared import Prepared


class NumWorkers(Technique):
    key = "num_workers"
    description = "DataLoader worker processes (0 loads in the training process)"
    order = 60

    def candidate_values(self, hw: Hardware) -> list[Any]:
        return [0, 1, 2, 4]

    def apply(self, value: Any, prepared: Prepared) -> None:
        prepared.loader_options["num_workers"] = value
        prepared.loader_options["persistent_workers"] = value > 0

    def snippet(self, value: Any) -> str | None:
        if value == 0:
            return None
        return f"loader = DataLoader(dataset, batch_size=..., num_workers={value}, persistent_workers=True)"


class PinMemory(Technique):
    key = "pin_memory"
    description = "page-locked host memory for batches (faster, asynchronous copies to the GPU)"
    order = 61

    def applies(self, hw: Hardware) -> str | None:
        if hw.device != "cuda":
            return "pinned memory speeds up host-to-GPU copies; this machine has no CUDA GPU"
        return None

    def unavailable(self, value: Any, hw: Hardware) -> str | None:
        return self.applies(hw) if value else None

    def apply(self, value: Any, prepared: Prepared) -> None:
        prepared.loader_options["pin_memory"] = bool(value) and prepared.device.type == "cuda"

    def snippet(self, value: Any) -> str | None:
        return "loader = DataLoader(dataset, batch_size=..., pin_memory=True)" if value else None
