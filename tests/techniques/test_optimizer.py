"""fused_optimizer: the user's optimizer switched to torch's fused kernel before its first
step, hyperparameters unchanged; refused with the reason where the class has none."""

from __future__ import annotations

import pytest
import torch

from advisor import apply
from advisor.core.config import TrialConfig
from advisor.core.errors import UnsupportedError
from advisor.core.results import TrialPayload, TrialSettings
from advisor.techniques.optimizer import use_fused
from advisor.techniques.registry import TECHNIQUES
from advisor.trial.entry import run_trial
from advisor.workload.contract import load_workload
from advisor.workload.preflight import preflight

from conftest import EXAMPLES, write_model


def _steps(fused: bool, make, steps: int = 5) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    prepared = apply(model, {"fused_optimizer": fused, "batch_size": 8}, "cpu")
    optimizer = make(model.parameters())
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x, y = torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)
        prepared.train_step(x, y, torch.nn.functional.cross_entropy, optimizer)
    return [p.detach().clone() for p in model.parameters()], optimizer


@pytest.mark.parametrize("make", [
    lambda p: torch.optim.AdamW(p, lr=3e-3, betas=(0.8, 0.95), weight_decay=0.1),
    lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True),
], ids=["adamw", "sgd"])
def test_the_same_optimizer_runs_fused_with_its_hyperparameters(make):
    plain, _ = _steps(False, make)
    fused, optimizer = _steps(True, make)
    group = optimizer.param_groups[0]
    assert group["fused"] is True and group["foreach"] is False
    assert group["lr"] in (3e-3, 0.05)  # the user's settings stand
    for a, b in zip(plain, fused):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)  # the same arithmetic, one kernel


def test_an_optimizer_without_a_fused_kernel_is_refused_with_the_reason():
    model = torch.nn.Linear(4, 2)
    with pytest.raises(UnsupportedError, match="RMSprop has no fused implementation"):
        use_fused(torch.optim.RMSprop(model.parameters()))
    stepped = torch.optim.AdamW(model.parameters())
    model(torch.randn(3, 4)).sum().backward()
    stepped.step()
    with pytest.raises(UnsupportedError, match="already taken a step"):
        use_fused(stepped)


def test_a_trial_with_the_fused_optimizer(tmp_path):
    base = TrialSettings(train_samples=600, max_timing_s=0.5)
    workload = load_workload(EXAMPLES / "digits_mlp.py")
    plain = run_trial(TrialPayload.of(workload, TrialConfig(batch_size=64), base))
    fused = run_trial(TrialPayload.of(workload, TrialConfig(batch_size=64, fused_optimizer=True), base))
    assert plain.ok and fused.ok, fused.failure_message
    assert fused.score == pytest.approx(plain.score, abs=0.02)  # AdamW either way


def test_pointless_for_a_workload_whose_optimizer_has_none(tmp_path):
    text = (EXAMPLES / "digits_mlp.py").read_text() + (
        "\n\ndef optimizer(parameters):\n    return torch.optim.RMSprop(parameters, lr=1e-3)\n")
    facts = preflight(load_workload(write_model(tmp_path, text)))
    assert facts["optimizer_class"] == "RMSprop" and facts["optimizer_fused"] is False
    assert "RMSprop" in TECHNIQUES["fused_optimizer"].pointless(True, facts)
    assert TECHNIQUES["fused_optimizer"].pointless(True, preflight(load_workload(EXAMPLES / "digits_mlp.py"))) is None


def test_the_whole_step_compiled_trains_as_eager():
    """compile + compile_optimizer: forward, backward and the update compiled; the same
    parameters as eager after the same steps (within float rounding)."""
    make = lambda p: torch.optim.AdamW(p, lr=3e-3)  # noqa: E731
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    prepared = apply(model, {"compile": True, "compile_optimizer": True, "batch_size": 8}, "cpu")
    optimizer = make(model.parameters())
    g = torch.Generator().manual_seed(1)
    for _ in range(5):
        x, y = torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)
        prepared.train_step(x, y, torch.nn.functional.cross_entropy, optimizer)
    assert getattr(optimizer.step, "_torchdynamo_orig_callable", None) is not None  # the step is torch.compile's
    eager, _ = _steps(False, make)
    for a, b in zip(eager, [p.detach() for p in model.parameters()]):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-5)
