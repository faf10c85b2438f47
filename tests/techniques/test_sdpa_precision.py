"""The CUDA flash and cuDNN attention kernels take fp16 / bf16 inputs only: pinned
(``sdpa_backend``) with fp32 or TF32 they fail with "No available kernel" (``advisor
doctor`` on an H100, torch 2.11). Each option is offered alone, so the rule is one between
knobs on a device (``advisor.techniques.rules.device_conflicts``): checked by ``refusal``
where the device is known (``apply``, the study's strategy and seeds, the doctor's plan).
The CPU tests judge DECLARED hardware (``tests/declared.py``: built by hand, no GPU here).
"""

from __future__ import annotations

import pytest
import torch

from advisor.core.config import TrialConfig
from advisor.core.errors import UnsupportedError
from advisor.core.objectives import Limits
from advisor.machine.hardware import GpuInfo
from advisor.search.one_knob import seed_configs
from advisor.search.space import filter_space, parse_space
from advisor.search.strategy import Run, Skip, Strategy
from advisor.techniques.prepare import apply
from advisor.techniques.rules import device_conflicts, refusal

from declared import GiB, cpu_node, gpu_node

DECLARED_H100 = gpu_node(GpuInfo(0, "NVIDIA H100 80GB HBM3", (9, 0), 80 * GiB))


@pytest.mark.parametrize("backend", ["flash", "cudnn"])
@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_a_half_only_kernel_in_full_precision_is_refused_on_cuda(backend, precision):
    config = TrialConfig(sdpa_backend=backend, precision=precision)
    reason = refusal(config, "train", DECLARED_H100.device)
    assert reason == device_conflicts(config, "cuda")
    assert f"CUDA {backend} attention kernel takes fp16 or bf16" in reason
    assert "expected precision bf16 / fp16 / bf16_full" in reason and f"found precision={precision}" in reason
    assert refusal(config, "train") is None  # whatever the hardware: each value runs somewhere


def test_the_kernels_run_where_they_can():
    """On CUDA in 16 bits (and the kernels that take fp32); on the CPU, torch's flash kernel
    takes fp32 (cuDNN is refused there by ``unavailable``, value by value)."""
    cuda = DECLARED_H100.device
    for backend in ("flash", "cudnn"):
        for precision in ("bf16", "fp16"):
            assert refusal(TrialConfig(sdpa_backend=backend, precision=precision), "train", cuda) is None
        assert refusal(TrialConfig(sdpa_backend=backend, precision="bf16_full"), "inference", cuda) is None
    for backend in ("default", "math", "efficient"):
        assert refusal(TrialConfig(sdpa_backend=backend, precision="fp32"), "train", cuda) is None
    assert refusal(TrialConfig(sdpa_backend="flash"), "train", cpu_node().device) is None


def test_apply_refuses_it_on_a_cuda_device_before_touching_the_model():
    """``advisor.apply`` checks the rule for the device it is given: no GPU is needed to
    see the refusal, the model is not moved (it would need one)."""
    model = torch.nn.Linear(4, 4)
    with pytest.raises(UnsupportedError, match="expected precision bf16 / fp16 / bf16_full, found precision=fp32"):
        apply(model, {"sdpa_backend": "flash"}, "cuda")
    assert model.weight.device.type == "cpu"


def test_the_search_skips_it_on_cuda_and_seeds_without_it():
    """The space keeps both values (each runs, with another precision); the strategy skips
    the combination as unsupported, and the one-knob seeds leave out the fp32 baseline with
    flash, on a CUDA node only."""
    space = parse_space({"precision": {"choices": ["fp32", "bf16"]},
                         "sdpa_backend": {"choices": ["default", "flash"]}}, "declared", "a declared space")
    assert filter_space(space, DECLARED_H100, {"calls_sdpa": True}).knobs == space.knobs
    base = TrialConfig(batch_size=32)

    def strategy(device):
        return Strategy(space, base, workload="train", sampler="random", budget=10, limits=Limits(0.01), device=device)

    decision = strategy("cuda").decide(base.replace(sdpa_backend="flash"))
    assert isinstance(decision, Skip) and decision.failure_class == "unsupported"
    assert "found precision=fp32" in decision.reason
    assert isinstance(strategy("cuda").decide(base.replace(sdpa_backend="flash", precision="bf16")), Run)
    assert isinstance(strategy("cpu").decide(base.replace(sdpa_backend="flash")), Run)
    assert [c.sdpa_backend for c in seed_configs(space, base, 5, "train", "cuda")] == ["default"]
    assert [c.sdpa_backend for c in seed_configs(space, base, 5, "train", "cpu")] == ["default", "flash"]


def _attention_model() -> torch.nn.Module:
    class Attention(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = torch.nn.Linear(64, 192)

        def forward(self, x):
            q, k, v = (t.unflatten(-1, (2, 32)).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=-1))
            return torch.nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2).flatten(2).sum(-1)

    return Attention()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 0),
                    reason="needs a CUDA GPU with compute capability >= 8.0 (the flash kernel)")
def test_on_cuda_flash_runs_in_bf16_and_is_refused_in_fp32():
    """The rule's premise on a real GPU (torch's own "No available kernel" in fp32: when a
    torch release runs flash in fp32, this fails and the rule can go), and the refusal."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(2, 2, 16, 32, device="cuda")
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]), pytest.raises(RuntimeError, match="No available kernel"):
        torch.nn.functional.scaled_dot_product_attention(q, q, q)
    with pytest.raises(UnsupportedError, match="found precision=fp32"):
        apply(_attention_model(), {"sdpa_backend": "flash"}, "cuda")
    prepared = apply(_attention_model(), {"sdpa_backend": "flash", "precision": "bf16"}, "cuda")
    optimizer = torch.optim.AdamW(prepared.module.parameters())
    x, y = torch.randn(8, 16, 64), torch.randn(8, 16)
    loss = prepared.train_step(x, y, torch.nn.functional.mse_loss, optimizer)
    assert torch.isfinite(loss)
