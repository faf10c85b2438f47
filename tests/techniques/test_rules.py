"""advisor/techniques/rules.py: the capability table (each technique's ``unavailable()``
reasons on DECLARED hardware), value checks and snippets through the registry, and the
rules between knobs (conflicts, refusal)."""

from __future__ import annotations

import pytest

from advisor.core.config import TrialConfig
from advisor.machine.hardware import GpuInfo
from advisor.techniques.registry import TECHNIQUES
from advisor.techniques.rules import capability_table, conflicts, refusal

from declared import A100, T4, GiB, cpu_node, gpu_node, reason, table

# ---- capability_table -----------------------------------------------------------------

def test_capability_table_covers_every_technique_option():
    """DECLARED 8-core CPU node."""
    rows = capability_table(cpu_node(cores=8))
    assert {r.key for r in rows} == set(TECHNIQUES)
    by_key = {}
    for r in rows:
        by_key.setdefault(r.key, []).append(r.value)
    assert by_key["precision"] == ["fp32", "tf32", "bf16", "fp16", "bf16_full"]
    assert by_key["threads"] == [1, 2, 4, 8]
    assert by_key["channels_last"] == [False, True]
    # Every refused row says why; every offered row has no reason.
    assert all(bool(r.reason) != r.available for r in rows)


@pytest.mark.parametrize("cores,expected", [(1, [1]), (6, [1, 2, 4, 6]), (16, [1, 2, 4, 8, 16])])
def test_thread_candidates_are_powers_of_two_up_to_the_core_count(cores, expected):
    """DECLARED CPUs with a given number of cores."""
    rows = capability_table(cpu_node(cores=cores), ["threads"])
    assert [r.value for r in rows] == expected
    assert all(r.available for r in rows)


def test_capability_table_keys_filter():
    """DECLARED CPU node."""
    rows = capability_table(cpu_node(), ["compile", "compile_mode"])
    assert {r.key for r in rows} == {"compile", "compile_mode"}
    assert capability_table(cpu_node(), []) == []


def test_capability_table_on_a100():
    """The A100 is DECLARED (Hardware built by hand), not a real GPU."""
    t = table(gpu_node(A100))
    for p in ("fp32", "tf32", "bf16", "fp16"):
        assert t[("precision", p)].available, t[("precision", p)].reason
    assert t[("compile_mode", "reduce-overhead")].available
    assert t[("compile", True)].available
    threads = [c for (k, _), c in t.items() if k == "threads"]
    assert threads and not any(c.available for c in threads)
    assert all("GPU" in c.reason for c in threads)


def test_capability_table_on_t4():
    """The T4 is DECLARED (Hardware built by hand), not a real GPU."""
    t = table(gpu_node(T4), ["precision"])
    assert t[("precision", "fp16")].available
    for p in ("tf32", "bf16"):
        row = t[("precision", p)]
        assert not row.available
        assert "compute capability >= 8.0" in row.reason and "Tesla T4" in row.reason


# ---- techniques: unavailable() reasons ------------------------------------------------

def test_precision_reasons_on_cpu():
    """DECLARED CPUs with and without native bf16/fp16."""
    plain = cpu_node({"avx2"})
    assert reason("precision", "fp32", plain) is None
    assert "no CUDA GPU" in reason("precision", "tf32", plain)
    assert "bf16" in reason("precision", "bf16", plain)
    assert "fp16" in reason("precision", "fp16", plain)
    amx = cpu_node({"amx_bf16", "amx_fp16"})
    assert reason("precision", "bf16", amx) is None
    assert reason("precision", "fp16", amx) is None
    assert "no CUDA GPU" in reason("precision", "tf32", amx)  # still no GPU


def test_precision_reasons_on_gpus():
    """DECLARED GPUs: a Volta, a Turing, an Ampere, a Hopper."""
    for name, cap in (("Tesla V100", (7, 0)), ("Tesla T4", (7, 5))):
        hw = gpu_node(GpuInfo(0, name, cap, 16 * GiB))
        assert reason("precision", "fp16", hw) is None
        for p in ("tf32", "bf16"):
            r = reason("precision", p, hw)
            assert r and "8.0" in r and name in r
    for name, cap in (("NVIDIA A100", (8, 0)), ("NVIDIA H100", (9, 0))):
        hw = gpu_node(GpuInfo(0, name, cap, 80 * GiB))
        assert all(reason("precision", p, hw) is None for p in ("fp32", "tf32", "bf16", "fp16"))


def test_compile_reasons():
    """DECLARED nodes: CPU with/without a C++ compiler, GPU with/without triton."""
    assert reason("compile", False, cpu_node(compiler=None)) is None
    assert reason("compile", True, cpu_node()) is None
    assert "C++ compiler" in reason("compile", True, cpu_node(compiler=None))
    assert reason("compile", True, gpu_node(A100)) is None
    assert "triton" in reason("compile", True, gpu_node(A100, triton=False))


def test_compile_mode_reasons():
    """DECLARED CPU and GPU nodes: CUDA-graph modes need a GPU."""
    for mode in ("reduce-overhead", "max-autotune"):
        assert "CUDA" in reason("compile_mode", mode, cpu_node())
        assert reason("compile_mode", mode, gpu_node(A100)) is None
    for mode in ("default", "max-autotune-no-cudagraphs"):
        assert reason("compile_mode", mode, cpu_node()) is None


def test_threads_reasons():
    """DECLARED 4-core CPU node and an A100 node."""
    hw = cpu_node(cores=4)
    assert reason("threads", None, hw) is None
    assert reason("threads", 4, hw) is None
    assert "4 cores" in reason("threads", 5, hw)
    assert "GPU" in reason("threads", 1, gpu_node(A100))
    assert reason("threads", None, gpu_node(A100)) is None


def test_channels_last_has_no_hardware_requirement():
    """DECLARED CPU and GPU nodes."""
    for hw in (cpu_node(), gpu_node(T4)):
        assert reason("channels_last", True, hw) is None


@pytest.mark.parametrize("key,value", [
    ("precision", "fp64"), ("precision", 16), ("channels_last", 1), ("channels_last", "yes"),
    ("compile", "true"), ("compile_mode", "fast"), ("threads", 0), ("threads", True), ("threads", 2.0),
])
def test_technique_check_rejects_bad_values(key, value):
    msg = TECHNIQUES[key].check(value)
    assert msg and repr(value) in msg


@pytest.mark.parametrize("key,value", [
    ("precision", "bf16"), ("channels_last", False), ("compile", True), ("compile_mode", "reduce-overhead"),
    ("threads", None), ("threads", 3),
])
def test_technique_check_accepts_valid_values(key, value):
    assert TECHNIQUES[key].check(value) is None


def test_snippets_are_plain_pytorch():
    assert TECHNIQUES["precision"].snippet("fp32") is None
    assert "torch.bfloat16" in TECHNIQUES["precision"].snippet("bf16")
    assert "GradScaler" in TECHNIQUES["precision"].snippet("fp16")
    assert "allow_tf32 = True" in TECHNIQUES["precision"].snippet("tf32")
    assert TECHNIQUES["threads"].snippet(4) == "torch.set_num_threads(4)"
    assert "channels_last" in TECHNIQUES["channels_last"].snippet(True)
    assert TECHNIQUES["channels_last"].snippet(False) is None
    assert TECHNIQUES["compile"].snippet(True) == "model = torch.compile(model)"
    assert TECHNIQUES["compile_mode"].snippet("max-autotune") == "model = torch.compile(model, mode='max-autotune')"


def test_techniques_apply_in_order_compile_last():
    keys = list(TECHNIQUES)
    assert keys[0] == "threads"
    assert keys[-1] == "compile"
    assert keys.index("precision") < keys.index("channels_last") < keys.index("compile")


# ---- rules between knobs --------------------------------------------------------------

@pytest.mark.parametrize("changes,says", [
    ({"comm_hook": "fp16"}, "comm_hook=fp16 applies to DDP"),
    ({"bucket_mb": 5}, "bucket_mb=5 applies to DDP"),
    ({"parallelism": "fsdp", "devices": 2, "pruning": "l1_unstructured"}, "FSDP shards them"),
    ({"parallelism": "fsdp", "devices": 2, "quantization": "qat_int8"}, "QAT conversion swaps Linear layers"),
    ({"parallelism": "fsdp", "devices": 2, "channels_last": True}, "channels_last weights are not"),
    ({"parallelism": "fsdp", "devices": 2, "precision": "fp16"}, "sharded gradient scaler"),
    ({"pruning": "l1_unstructured", "quantization": "fp8_training"}, "drop the pruning masks"),
    ({"pruning": "semi_structured_2_4", "quantization": "int8_dynamic"}, "cannot be quantized again"),
    ({"quantization": "int4_weight_only"}, "precision bf16_full"),
])
def test_conflicts_name_both_knobs_and_why(changes, says):
    assert says in (conflicts(TrialConfig(**changes)) or "")


def test_refusal_covers_workload_conflicts_and_batch_splits():
    assert refusal(TrialConfig(), "train") is None and refusal(TrialConfig(), "inference") is None
    assert "only applies to training" in refusal(TrialConfig(quantization="qat_int8"), "inference")
    assert "is for inference" in refusal(TrialConfig(precision="bf16_full"), "train")
    assert "applies to DDP" in refusal(TrialConfig(comm_hook="fp16"), "train")
    uneven = TrialConfig(batch_size=30, parallelism="ddp", devices=2, grad_accumulation=4)
    assert "does not split evenly into devices=2 x grad_accumulation=4" in refusal(uneven, "train")
