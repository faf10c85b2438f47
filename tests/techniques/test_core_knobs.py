"""The core knobs (precision, threads, channels_last, compile) under the shared contract."""

from __future__ import annotations

import torch

from technique_case import TechniqueCase


class TestPrecision(TechniqueCase):
    key = "precision"
    apply_values = ("fp32", "bf16")  # this CPU has avx512_bf16; fp16/tf32 are refused here

    def check_applied(self, prepared, value):
        assert prepared.amp_dtype == (torch.bfloat16 if value == "bf16" else None)
        assert all(p.dtype == torch.float32 for p in prepared.module.parameters())


class TestBf16Full(TechniqueCase):
    key = "precision"
    apply_values = ("bf16_full",)
    workload = "inference"
    example = "digits_inference.py"

    def check_applied(self, prepared, value):
        assert all(p.dtype == torch.bfloat16 for p in prepared.module.parameters())
        assert prepared.amp_dtype is None and prepared.input_dtype == torch.bfloat16


class TestThreads(TechniqueCase):
    key = "threads"
    apply_values = (1,)
    invalid_values = (0, -2, "four", True)

    def check_applied(self, prepared, value):
        assert torch.get_num_threads() == value


class TestChannelsLast(TechniqueCase):
    key = "channels_last"
    apply_values = (True,)
    invalid_values = ("yes", 1, None)

    def check_applied(self, prepared, value):
        conv = next(m for m in prepared.module.modules() if isinstance(m, torch.nn.Conv2d))
        assert conv.weight.is_contiguous(memory_format=torch.channels_last)


class TestCompile(TechniqueCase):
    key = "compile"
    apply_values = (False,)  # compiling for real is covered in test_apply (slow on CPU)
    invalid_values = ("yes", 1, None)


class TestCompileMode(TechniqueCase):
    key = "compile_mode"
