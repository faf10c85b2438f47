"""What this machine has: CPU and CUDA devices, compilers and libraries, the fingerprint.

``detect()`` reads the real machine. Tests build ``Hardware`` by hand to declare GPU
capability sets that cannot exist here. What each knob can do on a ``Hardware`` is the
techniques' business (``advisor.techniques.rules.capability_table``).
"""

from __future__ import annotations

import functools
import os
import platform
import shutil
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

# CPU feature flags (from /proc/cpuinfo) that matter to a precision choice.
CPU_FLAGS_OF_INTEREST = (
    "avx2", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni", "amx_bf16", "amx_fp16", "amx_int8",
)


@dataclass(frozen=True)
class CpuInfo:
    model: str
    cores: int
    flags: frozenset[str] = frozenset()

    @property
    def native_bf16(self) -> bool:
        return bool({"avx512_bf16", "amx_bf16"} & self.flags)

    @property
    def native_fp16(self) -> bool:
        return bool({"avx512_fp16", "amx_fp16"} & self.flags)


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    capability: tuple[int, int]
    memory_bytes: int

    @property
    def cc(self) -> str:
        return f"{self.capability[0]}.{self.capability[1]}"


@dataclass(frozen=True)
class Hardware:
    """One node's devices and software, as seen by the process that detected it."""

    cpu: CpuInfo
    gpus: tuple[GpuInfo, ...] = ()
    torch_version: str = ""
    cuda_version: str | None = None
    driver_version: str | None = None
    compiler: str | None = None  # the C++ compiler torch.compile's CPU backend needs
    triton: bool = False
    torchao: str | None = None  # torchao's version when installed (quantization needs it)
    notes: tuple[str, ...] = field(default=())
    # joined to a Ray cluster: the most ranks one trial can have over all its nodes (their
    # GPUs, or CPUs on CPU-only nodes); 0 on one machine
    cluster_devices: int = 0

    @property
    def device(self) -> str:
        """Where trials run on this node: 'cuda' when it has a GPU, else 'cpu'."""
        return "cuda" if self.gpus else "cpu"

    def min_capability(self) -> tuple[int, int] | None:
        return min((g.capability for g in self.gpus), default=None)

    def gpu_names(self) -> str:
        return ", ".join(sorted({f"{g.name} (compute capability {g.cc})" for g in self.gpus}))


def detect() -> Hardware:
    """Read this machine: CPU from /proc/cpuinfo, GPUs through torch and NVML."""
    import torch

    notes: list[str] = []
    gpus = _gpus()
    driver = _nvml_driver(notes)
    has_triton = False
    if gpus:
        try:
            import triton  # noqa: F401

            has_triton = True
        except ImportError:
            notes.append("triton is not installed: torch.compile cannot generate GPU kernels")
    return Hardware(
        torchao=_package_version("torchao"),
        cpu=_cpu_info(),
        gpus=tuple(gpus),
        torch_version=torch.__version__,
        cuda_version=torch.version.cuda,
        driver_version=driver,
        compiler=_compiler(),
        triton=has_triton,
        notes=tuple(notes),
    )


@functools.lru_cache(maxsize=4)
def on_device(device_type: str) -> Hardware:
    """This machine as a process that runs on ``device_type`` ("cpu", "cuda") sees it,
    read cheaply (``advisor.apply`` checks a configuration with it in every trial): no NVML
    (no driver version), triton found rather than imported; a "cpu" process sees no GPU,
    so what only a GPU runs is refused as a CPU trial refuses it. Once per process."""
    import importlib.util

    import torch

    gpus = tuple(_gpus()) if device_type == "cuda" else ()
    return Hardware(cpu=_cpu_info(), gpus=gpus, torch_version=torch.__version__, cuda_version=torch.version.cuda,
                    torchao=_package_version("torchao"), compiler=_compiler(),
                    triton=bool(gpus) and importlib.util.find_spec("triton") is not None)


def _gpus() -> list[GpuInfo]:
    """The CUDA devices torch sees."""
    import torch

    if not torch.cuda.is_available():
        return []
    return [GpuInfo(i, p.name, (p.major, p.minor), int(p.total_memory))
            for i in range(torch.cuda.device_count()) for p in [torch.cuda.get_device_properties(i)]]


def _compiler() -> str | None:
    """The C++ compiler torch.compile's CPU backend needs."""
    return shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")


def _package_version(name: str) -> str | None:
    """An installed distribution's version, without importing it (torchao's import is slow)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _cpu_info() -> CpuInfo:
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and model in ("", platform.machine(), platform.processor()):
                    model = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass  # not Linux: no flags readable, native bf16/fp16 reported as absent
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return CpuInfo(model=model, cores=cores, flags=frozenset(flags & set(CPU_FLAGS_OF_INTEREST)))


def _nvml_driver(notes: list[str]) -> str | None:
    """The NVIDIA driver version via NVML, or None when there is no driver (quietly)."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None  # no NVIDIA driver on this machine: nothing to report
    try:
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except pynvml.NVMLError as exc:
        notes.append(f"NVML is present but could not read the driver version: {exc}")
        return None
    finally:
        pynvml.nvmlShutdown()


def fingerprint(hw: Hardware) -> dict[str, Any]:
    """What a study stores to tell later whether numbers were measured on the same setup."""
    return {
        "cpu_model": hw.cpu.model,
        "cpu_cores": hw.cpu.cores,
        "cpu_flags": sorted(hw.cpu.flags),
        "gpus": [asdict(g) | {"capability": list(g.capability)} for g in hw.gpus],
        "driver_version": hw.driver_version,
        "torch_version": hw.torch_version,
        "torchao_version": hw.torchao,
        "cuda_version": hw.cuda_version,
        "python_version": platform.python_version(),
        "platform": f"{sys.platform}-{platform.machine()}",
    }


def describe_fingerprint(fingerprint: dict[str, Any]) -> str:
    """A stored hardware fingerprint in one line: 'AMD EPYC (2 cores), no GPU, torch 2.13.0+cpu'."""
    hw = fingerprint
    gpus = ", ".join(g.get("name", "?") for g in hw.get("gpus") or []) or "no GPU"
    return f"{hw.get('cpu_model', '?')} ({hw.get('cpu_cores', '?')} cores), {gpus}, torch {hw.get('torch_version', '?')}"
