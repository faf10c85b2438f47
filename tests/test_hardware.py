"""advisor/hardware.py (detect, capability_table, fingerprint) and each technique's
``unavailable()`` reasons.

Unless a test says it reads the real machine, its Hardware is DECLARED (built by hand):
the GPUs and CPU flags it names do not exist here.
"""

from __future__ import annotations

import json
import os
import platform

import pytest
import torch

from advisor.hardware import (
    CPU_FLAGS_OF_INTEREST, Capability, CpuInfo, GpuInfo, Hardware, capability_table, detect, fingerprint,
)
from advisor.techniques import TECHNIQUES

GiB = 1 << 30
A100 = GpuInfo(0, "NVIDIA A100-SXM4-40GB", (8, 0), 40 * GiB)
T4 = GpuInfo(0, "Tesla T4", (7, 5), 16 * GiB)
PLAIN_CPU = CpuInfo("declared CPU", 8, frozenset({"avx2", "avx512f"}))


def gpu_node(*gpus: GpuInfo, triton: bool = True) -> Hardware:
    return Hardware(cpu=PLAIN_CPU, gpus=gpus, triton=triton, compiler="/usr/bin/c++",
                    torch_version="2.5.0", cuda_version="12.4", driver_version="550.54")


def cpu_node(flags=frozenset({"avx2"}), cores: int = 8, compiler: str | None = "/usr/bin/c++") -> Hardware:
    return Hardware(cpu=CpuInfo("declared CPU", cores, frozenset(flags)), compiler=compiler, torch_version="2.5.0")


def table(hw: Hardware, keys=None) -> dict[tuple[str, object], Capability]:
    return {(c.key, c.value): c for c in capability_table(hw, keys)}


def reason(key: str, value, hw: Hardware) -> str | None:
    return TECHNIQUES[key].unavailable(value, hw)


# ---- detect(): the real machine -------------------------------------------------------

def test_detect_reads_this_machine():
    """Reads the REAL machine: CPU cores available to this process, torch's version."""
    hw = detect()
    expected_cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert hw.cpu.cores == expected_cores
    assert hw.cpu.model
    assert hw.cpu.flags <= set(CPU_FLAGS_OF_INTEREST)
    assert hw.torch_version == torch.__version__
    assert hw.cuda_version == torch.version.cuda
    assert len(hw.gpus) == (torch.cuda.device_count() if torch.cuda.is_available() else 0)
    assert hw.device == ("cuda" if hw.gpus else "cpu")


def test_detect_cpu_flags_match_proc_cpuinfo():
    """Reads the REAL machine's /proc/cpuinfo and compares the flags advisor cares about."""
    try:
        with open("/proc/cpuinfo") as fh:
            text = fh.read()
    except OSError:
        pytest.skip("no /proc/cpuinfo on this platform")
    line = next((ln for ln in text.splitlines() if ln.split(":")[0].strip() in ("flags", "Features")), None)
    if line is None:
        pytest.skip("/proc/cpuinfo lists no flags")
    flags = set(line.partition(":")[2].split())
    assert detect().cpu.flags == frozenset(flags & set(CPU_FLAGS_OF_INTEREST))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only path")
def test_detect_without_gpu_is_a_cpu_node():
    """Reads the REAL machine, which has no CUDA GPU: no GPUs, no driver, no triton claim."""
    hw = detect()
    assert hw.gpus == ()
    assert hw.device == "cpu"
    assert hw.triton is False
    assert hw.min_capability() is None
    # The capability table of this machine never offers TF32 (a GPU-only format).
    assert table(hw, ["precision"])[("precision", "tf32")].available is False


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_detect_finds_the_gpus_torch_sees():
    """Reads the REAL GPUs: one GpuInfo per device torch sees, with its capability."""
    hw = detect()
    assert hw.device == "cuda"
    assert len(hw.gpus) == torch.cuda.device_count()
    for i, gpu in enumerate(hw.gpus):
        props = torch.cuda.get_device_properties(i)
        assert gpu.index == i
        assert gpu.name == props.name
        assert gpu.capability == torch.cuda.get_device_capability(i)
        assert gpu.memory_bytes == props.total_memory > 0
        assert gpu.cc == f"{gpu.capability[0]}.{gpu.capability[1]}"
    assert hw.min_capability() == min(torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count()))
    # bf16 is offered exactly when every GPU is Ampere or newer.
    offered = table(hw, ["precision"])[("precision", "bf16")].available
    assert offered == (hw.min_capability() >= (8, 0))


# ---- the declared hardware model ------------------------------------------------------

def test_cpu_native_precision_flags():
    """DECLARED CPUs, one per flag combination."""
    assert not CpuInfo("c", 4, frozenset({"avx2", "avx512f"})).native_bf16
    assert CpuInfo("c", 4, frozenset({"avx512_bf16"})).native_bf16
    assert CpuInfo("c", 4, frozenset({"amx_bf16"})).native_bf16
    assert not CpuInfo("c", 4, frozenset({"amx_bf16", "avx512_bf16"})).native_fp16
    assert CpuInfo("c", 4, frozenset({"avx512_fp16"})).native_fp16
    assert CpuInfo("c", 4, frozenset({"amx_fp16"})).native_fp16


def test_gpu_node_properties():
    """DECLARED A100 + T4 node: the weakest GPU decides, and names list both."""
    hw = gpu_node(A100, GpuInfo(1, "Tesla T4", (7, 5), 16 * GiB))
    assert hw.device == "cuda"
    assert hw.min_capability() == (7, 5)
    assert hw.gpu_names() == "NVIDIA A100-SXM4-40GB (compute capability 8.0), Tesla T4 (compute capability 7.5)"
    # Two identical GPUs are named once.
    assert gpu_node(A100, GpuInfo(1, A100.name, (8, 0), 40 * GiB)).gpu_names().count("A100") == 1


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


# ---- fingerprint ----------------------------------------------------------------------

def test_fingerprint_is_json_and_describes_the_setup():
    """DECLARED A100 node."""
    fp = fingerprint(gpu_node(A100))
    assert json.loads(json.dumps(fp)) == fp  # stored as a study attribute: plain JSON data
    assert fp["cpu_model"] == "declared CPU" and fp["cpu_cores"] == 8
    assert fp["cpu_flags"] == ["avx2", "avx512f"]  # sorted
    assert fp["gpus"] == [{"index": 0, "name": A100.name, "capability": [8, 0], "memory_bytes": 40 * GiB}]
    assert fp["driver_version"] == "550.54" and fp["torch_version"] == "2.5.0" and fp["cuda_version"] == "12.4"
    assert fp["python_version"] == platform.python_version()


def test_fingerprint_tells_setups_apart():
    """DECLARED nodes: same hardware -> same fingerprint; a different GPU -> different."""
    assert fingerprint(gpu_node(A100)) == fingerprint(gpu_node(A100))
    assert fingerprint(gpu_node(A100)) != fingerprint(gpu_node(T4))
    assert fingerprint(cpu_node(cores=4)) != fingerprint(cpu_node(cores=8))


def test_fingerprint_of_this_machine_is_json():
    """Reads the REAL machine."""
    fp = fingerprint(detect())
    assert json.loads(json.dumps(fp)) == fp
    assert fp["torch_version"] == torch.__version__
