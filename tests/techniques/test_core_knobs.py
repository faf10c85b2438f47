"""The core knobs (precision, threads, channels_last, compile) under the shared contract."""

from __future__ import annotations

import torch

from technique_case import TechniqueCase


class TestPrecision(TechniqueCase):
    key = "precision"
    apply_values = ("fp32", "bf16")  # this CPU has avx512_bf16; fp16/tf32 are refused here
    workload_refusals = frozenset({("bf16_full", "train")})

    def check_applied(self, prepared, value):
        assert prepared.amp_dtype == (torch.bfloat16 if value == "bf16" else None)
        assert all(p.dtype == torch.float32 for p in prepared.module.parameters())


class TestBf16Full(TechniqueCase):
    key = "precision"
    apply_values = ("bf16_full",)
    workload_refusals = frozenset({("bf16_full", "train")})
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
    applied_elsewhere = ("test_prepare.py::test_compile_wraps_the_model_and_trains and TestCompileMode here "
                         "(compiling costs seconds on a CPU; once is enough)")
    invalid_values = ("yes", 1, None)


class TestCompileMode(TechniqueCase):
    key = "compile_mode"
    apply_values = ("max-autotune-no-cudagraphs",)  # the one non-default mode a CPU runs
    extra = {"compile": True}
    example = "digits_mlp.py"

    def check_applied(self, prepared, value):
        assert prepared.compiled
        config = prepared.model.get_compiler_config()  # inductor's options for this compiled module
        assert config["max_autotune"] is True and config["triton.cudagraphs"] is False
