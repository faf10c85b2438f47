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

from advisor.core.config import TrialConfig
from advisor.core.errors import UnsupportedError
from advisor.core.results import WORKLOADS
from advisor.machine.hardware import CpuInfo, GpuInfo, Hardware
from advisor.techniques.prepare import apply
from advisor.techniques.prepared import Prepared
from advisor.techniques.registry import TECHNIQUES
from advisor.techniques.rules import capability_table

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
    from advisor.workload.contract import load_datasets, load_workload

    train, _ = load_datasets(load_workload(EXAMPLES / example))
    loader = torch.utils.data.DataLoader(train, batch_size=batch_size)
    return [b for b, _ in zip(loader, range(count))]


def digits_model(example: str = "digits_cnn.py") -> torch.nn.Module:
    from advisor.workload.contract import build_model, load_workload

    torch.manual_seed(0)
    return build_model(load_workload(EXAMPLES / example))


class TechniqueCase:
    """Subclass with ``key`` set; override ``check_applied`` for knob-specific assertions.

    Every subclass either applies values for real here (``apply_values``) or names the
    test that does (``applied_elsewhere``: a knob that acts only inside a DDP process
    group, say), and declares which of its values a workload refuses
    (``workload_refusals``), so no inherited test passes by looping over nothing.
    """

    key: ClassVar[str]
    apply_values: ClassVar[tuple[Any, ...]] = ()     # applied for real here (CPU)
    applied_elsewhere: ClassVar[str] = ""             # else: the test that applies the knob for real
    workload_refusals: ClassVar[frozenset[tuple[Any, str]]] = frozenset()  # (value, workload) refused
    invalid_values: ClassVar[tuple[Any, ...]] = ("no-such-option", None, 1.5)
    workload: ClassVar[str] = "train"
    example: ClassVar[str] = "digits_cnn.py"
    extra: ClassVar[dict[str, Any]] = {}              # other knobs the values need
    snippet_via: ClassVar[tuple[str, str] | None] = None  # (knob, placeholder) whose lines carry this value

    @pytest.fixture(autouse=True)
    def _keep_torch_threads(self):
        """A knob may change process-wide torch state (the thread count): restore it."""
        threads = torch.get_num_threads()
        yield
        torch.set_num_threads(threads)

    @property
    def technique(self) -> Any:
        return TECHNIQUES[self.key]

    def all_values(self) -> list[Any]:
        return list(dict.fromkeys([*self.technique.candidate_values(DECLARED["8x H100"]), *self.apply_values]))

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
        texts = {v: self.technique.snippet(v) for v in self.all_values()}
        for value, text in texts.items():
            if text is not None:
                compile(text, f"<{self.key}={value!r} snippet>", "exec")
        if not any(texts.values()):  # a knob whose value goes into another knob's lines
            assert self.snippet_via, f"{self.key} has no plain-PyTorch lines for any value"
            owner, placeholder = self.snippet_via
            assert any(placeholder in (TECHNIQUES[owner].snippet(v) or "") for v in TECHNIQUES[owner].values)

    def test_values_of_the_other_workload_are_refused_by_apply_naming_the_knob(self):
        refused = {(v, w) for v in self.all_values() for w in WORKLOADS if self.technique.wrong_workload(v, w)}
        assert refused == set(self.workload_refusals)
        for value, workload in sorted(refused, key=repr):
            with pytest.raises(UnsupportedError, match=self.key):
                apply(digits_model(self.example), {**self.extra, self.key: value}, "cpu", workload=workload)

    def prepare(self, value: Any) -> Prepared:
        return apply(digits_model(self.example), {**self.extra, self.key: value}, "cpu", workload=self.workload)

    def test_each_cpu_value_applies_trains_and_evaluates(self):
        if not self.apply_values:
            assert self.applied_elsewhere, (f"{type(self).__name__} applies no value: set apply_values, or "
                                            "applied_elsewhere naming the test that applies the knob for real")
            pytest.skip(f"{self.key} is applied for real in {self.applied_elsewhere}")
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
