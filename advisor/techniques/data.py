"""Data loading: DataLoader worker processes, and pinned host memory for GPU copies.
Loading the next batch is part of the measured training step."""

from __future__ import annotations

import multiprocessing
import sys
from typing import TYPE_CHECKING, Any

from advisor.techniques._base import Technique

if TYPE_CHECKING:
    from advisor.machine.hardware import Hardware
    from advisor.techniques.prepared import Prepared


_FORK = "fork"


def _fork_workers() -> bool:
    """DataLoader workers are forked on Linux (PyTorch's long-standing default there; on
    macOS fork is unsafe and spawn the default, left alone)."""
    return sys.platform.startswith("linux") and _FORK in multiprocessing.get_all_start_methods()


class NumWorkers(Technique):
    key = "num_workers"
    description = "DataLoader worker processes (0 loads in the training process)"

    def candidate_values(self, hw: Hardware) -> list[Any]:
        return [0, 1, 2, 4]

    def pointless(self, value: Any, facts: dict[str, Any]) -> str | None:
        if (value > 1 and facts.get("train_stream") and facts.get("stream_shards_workers") is False
                and facts.get("workload", "train") == "train"):
            return ("the training set is a stream that does not shard itself among DataLoader workers (it never "
                    "reads torch.utils.data.get_worker_info()): each worker would read the whole stream to keep its "
                    "own batches, no faster than 1 worker")
        return None

    def apply(self, value: Any, prepared: Prepared) -> None:
        prepared.loader_options["num_workers"] = value
        prepared.loader_options["persistent_workers"] = value > 0
        if value > 0 and _fork_workers():
            # Workers forked from the training process inherit the dataset as it is. A trial
            # process is started by a fork server, so its own children would start that way
            # too (and Python 3.14 makes that the default): the dataset would be pickled, and
            # a Dataset class defined in model.py, loaded under a private module name, cannot.
            prepared.loader_options["multiprocessing_context"] = _FORK

    def snippet(self, value: Any) -> str | None:
        if value == 0:
            return None
        context = ", multiprocessing_context='fork'" if _fork_workers() else ""
        return f"loader = DataLoader(dataset, batch_size=..., num_workers={value}, persistent_workers=True{context})"


class PinMemory(Technique):
    key = "pin_memory"
    description = "page-locked host memory for batches (faster, asynchronous copies to the GPU)"

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
