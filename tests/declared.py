"""DECLARED hardware for tests: nodes built by hand. The GPUs and CPU flags they name do
not exist on the machine the tests run on."""

from __future__ import annotations

from advisor.machine.hardware import CpuInfo, GpuInfo, Hardware
from advisor.techniques.registry import TECHNIQUES
from advisor.techniques.rules import Capability, capability_table

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
