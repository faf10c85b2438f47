"""advisor/machine/hardware.py: detect, the declared hardware model, fingerprint.

Unless a test says it reads the real machine, its Hardware is DECLARED (built by hand):
the GPUs and CPU flags it names do not exist here.
"""

from __future__ import annotations

import json
import os
import platform

import pytest
import torch

from advisor.machine.hardware import CPU_FLAGS_OF_INTEREST, CpuInfo, GpuInfo, describe_fingerprint, detect, fingerprint

from declared import A100, T4, GiB, cpu_node, gpu_node, table

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


def test_a_process_on_a_device_sees_the_machine_as_a_trial_there_does():
    """``on_device`` (apply()'s check, once per process): what detect() reads but NVML's
    driver version; a CPU process sees no GPU, a CUDA one the GPUs torch sees."""
    from advisor.machine.hardware import on_device

    full = detect()
    cpu, cuda = on_device("cpu"), on_device("cuda")
    assert cpu.gpus == () and cpu.device == "cpu" and cpu.driver_version is None
    assert cuda.gpus == full.gpus and cuda.triton == full.triton
    for seen in (cpu, cuda):
        assert (seen.cpu, seen.compiler, seen.torchao, seen.torch_version) == (full.cpu, full.compiler, full.torchao,
                                                                              full.torch_version)
    assert on_device("cpu") is cpu  # read once


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


def test_describe_fingerprint_in_one_line():
    """DECLARED A100 node, and a fingerprint stored by an older version (keys missing)."""
    assert describe_fingerprint(fingerprint(gpu_node(A100))) == "declared CPU (8 cores), NVIDIA A100-SXM4-40GB, torch 2.5.0"
    assert describe_fingerprint({}) == "? (? cores), no GPU, torch ?"
