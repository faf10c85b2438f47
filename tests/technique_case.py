"""The shared test base class for techniques (one knob = one module).

Every technique's tests subclass ``TechniqueCase`` and set ``key`` and the values to
apply for real on this CPU; the base class checks the contract every knob must keep:
registered with a TrialConfig field, values validated, reasons in words for hardware that
cannot run an option (on DECLARED hardware, built by hand: no GPU exists here), snippets
that are valid Python, and each CPU value applied to a real model that trains a step on
real (bundled) digits and evaluates.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import pytest
import torch

from advisor.apply import Prepared, apply
from advisor.config import TrialConfig
from advisor.errors import UnsupportedError
from advisor.hardware import CpuInfo, GpuInfo, Hardware, capability_table
from advisor.techniques import TECHNIQUES
from conftest import EXAMPLES


def cpu_node(cores: int = 2, flags: frozenset[str] = frozenset({"avx512_bf16"}), torchao: str | None = "0.18.0") -> Hardware:
    return Hardware(cpu=CpuInfo("DECLARED CPU", cores, flags), compiler="/usr/bin/c++", torchao=torchao)


def gpu_node(name: str, cap: tuple[int, int], count: int = 1, torchao: str | None = "0.18.0") -> Hardware:
    gpus = tuple(GpuInfo(i, name, cap, 80 << 30) for i in range(count))
    return Hardware(cpu=CpuInfo("DECLARED CPU", 32), gpus=gpus, triton=True, torchao=torchao)


DECLARED = {
    "1-core CPU": cpu_node(cores=1, flags=frozenset()),
    "8-core CPU": cpu_node(cores=8),
    "T4": gpu_node("NVIDIA T4", (7, 5)),
    "A100": gpu_node("NVIDIA A100", (8, 0)),
    "8x H100": gpu_node("NVIDIA H100", (9, 0), count=8),
}


def digits_batches(example: str = "digits_cnn.py", batch_size: int = 32, count: int = 2) -> list[tuple[Any, Any]]:
    from advisor.workload import load_datasets, load_workload

    train, _ = load_datasets(load_workload(EXAMPLES / example))
    loader = torch.utils.data.DataLoader(train, batch_size=batch_size)
    return [b for b, _ in zip(loader, range(count))]


def digits_model(example: str = "digits_cnn.py") -> torch.nn.Module:
    from advisor.workload import build_model, load_workload

    torch.manual_seed(0)
    return build_model(load_workload(EXAMPLES / example))


class TechniqueCase:
    """Subclass with ``key`` set; override ``check_applied`` for knob-specific assertions."""

    key: ClassVar[str]
    apply_values: ClassVar[tuple[Any, ...]] = ()     # applied for real here (CPU)
    invalid_values: ClassVar[tuple[Any, ...]] = ("no-such-option", None, 1.5)
    workload: ClassVar[str] = "train"
    example: ClassVar[str] = "digits_cnn.py"
    extra: ClassVar[dict[str, Any]] = {}              # other knobs the values need

    @property
    def technique(self) -> Any:
        return TECHNIQUES[self.key]

    def test_registered_with_a_config_field(self):
        assert self.key in TrialConfig.keys()
        assert self.technique.description
        default = getattr(TrialConfig(), self.key)
        assert self.technique.check(default) is None, "the default value must be valid"

    def test_invalid_values_are_refused_with_what_is_expected(self):
        for value in self.invalid_values:
            error = self.technique.check(value)
            assert error and "expected" in error, (value, error)

    @pytest.mark.parametrize("node", sorted(DECLARED))
    def test_capability_rows_are_valid_values_with_reasons_in_words(self, node):
        hw = DECLARED[node]
        rows = [r for r in capability_table(hw) if r.key == self.key]
        assert rows, f"{self.key} lists no option on {node}"
        for row in rows:
            assert self.technique.check(row.value) is None, row
            if not row.available:
                assert len(row.reason.split()) >= 5, f"{node}: {row.value!r}: reason {row.reason!r} is not a sentence"

    def test_snippets_are_valid_python(self):
        for value in self.technique.candidate_values(DECLARED["8x H100"]) + list(self.apply_values):
            text = self.technique.snippet(value)
            if text is not None:
                compile(text, f"<{self.key}={value!r} snippet>", "exec")

    def test_wrong_workload_is_refused_by_apply(self):
        for value, workload in [(v, "inference") for v in self.technique.train_only] + \
                               [(v, "train") for v in self.technique.inference_only]:
            with pytest.raises(UnsupportedError, match=self.key):
                apply(digits_model(self.example), {**self.extra, self.key: value}, "cpu", workload=workload)

    def prepare(self, value: Any) -> Prepared:
        return apply(digits_model(self.example), {**self.extra, self.key: value}, "cpu", workload=self.workload)

    def test_each_cpu_value_applies_trains_and_evaluates(self):
        for value in self.apply_values:
            prepared = self.prepare(value)
            batches = digits_batches(self.example)
            if self.workload == "train":
                optimizer = torch.optim.AdamW(prepared.module.parameters(), lr=1e-3)
                for x, y in batches:
                    loss = prepared.train_step(x, y, torch.nn.functional.cross_entropy, optimizer)
                    assert math.isfinite(float(loss)), (value, loss)
                prepared.finish()
            prepared.model.eval()
            with torch.inference_mode():
                out = prepared.predict(batches[0][0])
            assert out.shape == (len(batches[0][0]), 10), value
            self.check_applied(prepared, value)

    def check_applied(self, prepared: Prepared, value: Any) -> None:
        """Knob-specific assertions on a prepared, trained and finished model."""
