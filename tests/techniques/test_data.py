"""DataLoader workers and pinned memory."""

from __future__ import annotations

import pytest
import torch

from advisor.techniques.prepare import apply
from advisor.workload.contract import load_datasets, load_workload

from conftest import EXAMPLES
from technique_case import DECLARED, TechniqueCase, digits_model


class TestNumWorkers(TechniqueCase):
    key = "num_workers"
    apply_values = (0, 2)
    invalid_values = (-1, 1.5, "two", True)

    def check_applied(self, prepared, value):
        assert prepared.loader_options["num_workers"] == value


def test_loader_uses_workers_and_loads_every_sample():
    train, _ = load_datasets(load_workload(EXAMPLES / "digits_cnn.py"))
    prepared = apply(digits_model(), {"num_workers": 2, "batch_size": 64}, "cpu")
    loader = prepared.loader(train, shuffle=True, drop_last=False)
    assert loader.num_workers == 2 and loader.persistent_workers
    assert sum(len(y) for _, y in loader) == len(train)


class TestPinMemory(TechniqueCase):
    key = "pin_memory"
    apply_values = (True,)
    invalid_values = ("yes", 1, None)

    def check_applied(self, prepared, value):
        assert prepared.loader_options["pin_memory"] is False  # a CPU device: pinning has nothing to speed up


def test_pin_memory_knob_is_removed_without_a_gpu():
    from advisor.techniques.registry import TECHNIQUES

    assert "GPU" in TECHNIQUES["pin_memory"].applies(DECLARED["8-core CPU"])
    assert TECHNIQUES["pin_memory"].applies(DECLARED["A100"]) is None


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_pinned_batches_on_cuda():
    train, _ = load_datasets(load_workload(EXAMPLES / "digits_cnn.py"))
    prepared = apply(digits_model(), {"pin_memory": True}, "cuda")
    x, _ = next(iter(prepared.loader(train)))
    assert x.is_pinned()
