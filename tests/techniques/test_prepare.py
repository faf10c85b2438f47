"""advisor/techniques/prepare.py: apply() turns a TrialConfig into a prepared model and training step.

Real torch models; the loss test trains on scikit-learn's bundled digits data.
"""

from __future__ import annotations

import importlib
import math

import pytest
import torch
from torch import nn

import advisor
from advisor.core.config import TrialConfig
from advisor.core.errors import ConfigError, UnsupportedError
from advisor.techniques.prepare import apply
from advisor.techniques.prepared import Prepared, default_device

CPU = torch.device("cpu")


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))


def cnn(in_channels: int = 3) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(in_channels, 16, 3, padding=1), nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
    )


def batch(n: int = 8, shape=(64,)) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(n, *shape, generator=g), torch.randint(0, 10, (n,), generator=g)


def sgd(prepared: Prepared, lr: float = 0.05) -> torch.optim.Optimizer:
    return torch.optim.SGD(prepared.module.parameters(), lr=lr)


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield before
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.data, dtype=torch.float32) / 16.0
    y = torch.tensor(d.target, dtype=torch.long)
    return x[:1400], y[:1400], x[1400:], y[1400:]


# ---- precision ------------------------------------------------------------------------

def test_fp32_has_no_autocast_and_no_scaler():
    prepared = apply(mlp(), TrialConfig(), device="cpu")
    assert prepared.amp_dtype is None and prepared.scaler is None
    x, _ = batch()
    with prepared.autocast():
        assert prepared.model(x).dtype == torch.float32


def test_bf16_autocasts_forward_to_bfloat16():
    prepared = apply(mlp(), TrialConfig(precision="bf16"), device="cpu")
    assert prepared.amp_dtype == torch.bfloat16
    assert prepared.scaler is None  # bf16 needs no loss scaling
    x, y = batch()
    with prepared.autocast():
        assert prepared.model(x).dtype == torch.bfloat16
    assert prepared.model(x).dtype == torch.float32  # outside the region: fp32 again
    with torch.inference_mode():
        assert prepared.predict(x).dtype == torch.bfloat16
    # Parameters stay fp32 (autocast, not a cast of the model) and training works.
    assert all(p.dtype == torch.float32 for p in prepared.module.parameters())
    loss = prepared.train_step(x, y, nn.functional.cross_entropy, sgd(prepared))
    assert math.isfinite(loss.item()) and not loss.requires_grad


def test_fp16_uses_a_grad_scaler_on_cpu():
    prepared = apply(mlp(), TrialConfig(precision="fp16"), device="cpu")
    assert prepared.amp_dtype == torch.float16
    assert isinstance(prepared.scaler, torch.amp.GradScaler)
    x, y = batch()
    before = [p.detach().clone() for p in prepared.module.parameters()]
    loss = prepared.train_step(x, y, nn.functional.cross_entropy, sgd(prepared))
    assert math.isfinite(loss.item())
    assert any(not torch.equal(b, p) for b, p in zip(before, prepared.module.parameters()))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_fp16_on_cuda_scales_the_loss_and_trains():
    """Runs on a REAL CUDA GPU: fp16 autocast with a GradScaler, the model on the GPU."""
    model = mlp()
    prepared = apply(model, TrialConfig(precision="fp16"), device="cuda")
    assert prepared.device.type == "cuda"
    assert isinstance(prepared.scaler, torch.amp.GradScaler)
    assert prepared.amp_dtype == torch.float16
    assert all(p.device.type == "cuda" for p in model.parameters())
    x, y = batch()
    with prepared.autocast():
        assert prepared.model(x.cuda()).dtype == torch.float16
    opt = sgd(prepared)
    losses = [prepared.train_step(x, y, nn.functional.cross_entropy, opt).item() for _ in range(20)]
    prepared.synchronize()
    assert all(math.isfinite(v) for v in losses)
    assert prepared.scaler.get_scale() > 0
    assert losses[-1] < losses[0]
    # "fp32" on CUDA means strict fp32: TF32 switched off again.
    apply(mlp(), TrialConfig(precision="fp32"), device="cuda")
    assert torch.backends.cuda.matmul.allow_tf32 is False


# ---- channels_last --------------------------------------------------------------------

def test_channels_last_converts_conv_weights_and_4d_inputs():
    model = cnn(in_channels=3)
    prepared = apply(model, TrialConfig(channels_last=True), device="cpu")
    assert prepared.memory_format == torch.channels_last
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    for conv in convs:
        assert conv.weight.is_contiguous(memory_format=torch.channels_last)
        assert not conv.weight.is_contiguous()
    x, y = batch(4, (3, 8, 8))
    assert x.is_contiguous()
    moved = prepared.to_device(x)
    assert moved.is_contiguous(memory_format=torch.channels_last) and not moved.is_contiguous()
    assert torch.equal(moved, x)  # same values, different layout
    assert torch.equal(prepared.to_device(y), y)  # 1-D targets untouched
    loss = prepared.train_step(x, y, nn.functional.cross_entropy, sgd(prepared))
    assert math.isfinite(loss.item())


def test_without_channels_last_inputs_keep_their_layout():
    prepared = apply(cnn(), TrialConfig(), device="cpu")
    assert prepared.memory_format is None
    x, _ = batch(4, (3, 8, 8))
    assert prepared.to_device(x).is_contiguous()


def test_channels_last_refuses_a_model_without_conv2d():
    with pytest.raises(UnsupportedError, match="2-D convolutions"):
        apply(mlp(), TrialConfig(channels_last=True), device="cpu")


def test_to_device_handles_nested_batches():
    prepared = apply(cnn(), TrialConfig(channels_last=True), device="cpu")
    img, y = batch(2, (3, 4, 4))
    out = prepared.to_device({"image": img, "extra": (y, [img]), "name": "keep"})
    assert out["name"] == "keep"
    assert isinstance(out["extra"], tuple) and isinstance(out["extra"][1], list)
    assert out["image"].is_contiguous(memory_format=torch.channels_last)
    assert out["extra"][1][0].is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(out["extra"][0], y)


# ---- threads --------------------------------------------------------------------------

def test_threads_sets_torch_thread_count(restore_threads):
    target = 1 if restore_threads != 1 else 2
    apply(mlp(), TrialConfig(threads=target), device="cpu")
    assert torch.get_num_threads() == target


def test_threads_none_keeps_the_current_count(restore_threads):
    apply(mlp(), TrialConfig(threads=None), device="cpu")
    assert torch.get_num_threads() == restore_threads


# ---- compile --------------------------------------------------------------------------

def test_compile_wraps_the_model_and_trains():
    """One tiny model: torch.compile costs ~10 s on a CPU."""
    torch.manual_seed(0)
    model = nn.Linear(8, 2)
    prepared = apply(model, TrialConfig(compile=True), device="cpu")
    assert prepared.compiled
    assert prepared.module is model
    assert prepared.model is not model
    assert isinstance(prepared.model, torch._dynamo.eval_frame.OptimizedModule)
    x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
    before = model.weight.detach().clone()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = [prepared.train_step(x, y, nn.functional.cross_entropy, opt).item() for _ in range(5)]
    assert all(math.isfinite(v) for v in losses)
    assert not torch.equal(before, model.weight)  # the optimizer updates the wrapped module
    assert losses[-1] < losses[0]


def test_no_compile_calls_the_module_itself():
    model = mlp()
    prepared = apply(model, TrialConfig(), device="cpu")
    assert prepared.model is model and not prepared.compiled


# ---- apply() itself -------------------------------------------------------------------

def test_train_step_reduces_loss_on_digits(digits):
    x_train, y_train, x_val, y_val = digits
    prepared = apply(mlp(), {"batch_size": 64}, device="cpu")
    opt = torch.optim.AdamW(prepared.module.parameters(), lr=1e-2)
    loss_fn = nn.functional.cross_entropy

    def val_loss() -> float:
        with torch.inference_mode():
            return loss_fn(prepared.predict(x_val), y_val).item()

    start = val_loss()
    g = torch.Generator().manual_seed(0)
    bs = prepared.config.batch_size
    for _ in range(4):
        order = torch.randperm(len(x_train), generator=g)
        for i in range(0, len(order), bs):
            idx = order[i:i + bs]
            prepared.train_step(x_train[idx], y_train[idx], loss_fn, opt)
    assert val_loss() < 0.25 * start  # ~2.3 (chance) -> ~0.4
    with torch.inference_mode():
        accuracy = (prepared.predict(x_val).argmax(-1) == y_val).float().mean().item()
    assert accuracy > 0.8  # chance is 0.1


def test_apply_accepts_a_mapping_and_validates_it():
    prepared = apply(mlp(), {"precision": "bf16", "batch_size": 32}, device="cpu")
    assert prepared.config == TrialConfig(precision="bf16", batch_size=32)
    with pytest.raises(ConfigError, match="precision"):
        apply(mlp(), {"precision": "fp64"}, device="cpu")


def test_a_value_this_device_cannot_run_is_applied_with_a_warning_naming_it():
    """As `advisor tune` would refuse it on this device (the capability table): TF32 and fp8
    training on a CPU, pinned memory without a GPU. A review applied such an export to a CPU
    model without a word."""
    import warnings

    for knob, value, why in [("precision", "tf32", "TF32 is a tensor-core format of NVIDIA GPUs"),
                             ("pin_memory", True, "pinned memory speeds up host-to-GPU copies")]:
        with pytest.warns(UserWarning) as caught:
            prepared = apply(mlp(), {"batch_size": 32, knob: value}, device="cpu")
        (text,) = [str(w.message) for w in caught if "cannot run on cpu" in str(w.message)]
        assert text.startswith(f"apply(): {knob}={'true' if value is True else repr(value).replace(chr(39), chr(34))} "
                               "cannot run on cpu here: ") and why in text, text
        assert text.endswith("applied all the same, but what runs here is not what was measured")
        assert caught[0].filename == __file__  # the caller's line
        assert getattr(prepared.config, knob) == value
    from advisor.machine.hardware import on_device

    native_bf16 = on_device("cpu").cpu.native_bf16  # an AMD EPYC here has none: bf16 is then refused too
    runs = {"batch_size": 32, "threads": 1} | ({"precision": "bf16"} if native_bf16 else {})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # what a CPU runs: not a word
        apply(mlp(), runs, device="cpu")
    if not native_bf16:
        with pytest.warns(UserWarning, match="no native bf16 instructions"):
            apply(mlp(), {"batch_size": 32, "precision": "bf16"}, device="cpu")


def test_apply_defaults_to_the_current_device():
    prepared = apply(mlp(), TrialConfig())
    assert prepared.device == default_device()
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert prepared.device.type == expected
    assert all(p.device.type == expected for p in prepared.module.parameters())


def test_public_apply_is_the_function():
    importlib.import_module("advisor.trial.loop")  # as the trial, which imports apply from its module
    assert advisor.apply is apply
    prepared = advisor.apply(mlp(), TrialConfig(precision="bf16"), device="cpu")
    assert isinstance(prepared, Prepared) and prepared.amp_dtype == torch.bfloat16


def test_an_unknown_workload_kind_is_a_config_error():
    with pytest.raises(ConfigError, match="apply\\(\\): workload is 'serve', expected train or inference"):
        apply(mlp(), TrialConfig(), device="cpu", workload="serve")


def test_prepared_keeps_its_parts_in_typed_records_and_the_flat_names_still_read_and_write_them():
    """``Prepared``'s state sits in three records (ranks, numerics, step); code written
    against the flat names (``prepared.rank``, ``prepared.amp_dtype``, ...) reads and
    writes the same values."""
    from dataclasses import FrozenInstanceError, fields

    from advisor.techniques.records import Numerics, Ranks, StepPlan

    p = apply(mlp(), TrialConfig(precision="fp16", grad_accumulation=2), device="cpu")
    assert isinstance(p.ranks, Ranks) and isinstance(p.numerics, Numerics) and isinstance(p.step, StepPlan)
    assert p.numerics.amp_dtype is torch.float16 and p.amp_dtype is torch.float16
    assert p.numerics.scaler is not None and p.scaler is p.numerics.scaler
    assert p.step.accumulation == 2 and p.accumulation == 2
    assert (p.rank, p.world, p.dp_rank, p.dp_world) == (0, 1, 0, 1)
    with pytest.raises(FrozenInstanceError):  # the ranks change whole, never one field behind another's back
        p.ranks.rank = 3  # type: ignore[misc]
    p.rank, p.world = 1, 2  # the flat names replace the frozen record
    assert p.ranks == Ranks(rank=1, world=2, dp_rank=0, dp_world=1) and not p.reports
    p.accumulation = 4
    p.finishers.append(print)
    assert p.step.accumulation == 4 and p.step.finishers == [print]
    flat = {f.name for r in (Ranks, Numerics, StepPlan) for f in fields(r)}
    assert all(isinstance(getattr(p, name), type(getattr(getattr(p, rec), name)))
               for rec, cls in (("ranks", Ranks), ("numerics", Numerics), ("step", StepPlan))
               for name in (f.name for f in fields(cls)))
    assert flat.isdisjoint(f.name for f in fields(Prepared))  # one place each


def test_each_prepared_has_records_of_its_own():
    a = apply(mlp(), TrialConfig(), device="cpu")
    b = apply(mlp(), TrialConfig(grad_accumulation=2, pruning="l1_unstructured"), device="cpu")
    assert a.step is not b.step and a.step.finishers == [] and b.step.finishers
    assert a.accumulation == 1 and b.accumulation == 2


# ---- what apply() is given: a user's mistakes (a review's, run as a user would) ---------

def test_apply_refuses_what_it_would_build_differently_from_what_was_measured(tmp_path):
    from advisor.core.errors import AdvisorError

    prepared = apply(mlp(), {"pruning": "l1_unstructured"}, device="cpu")
    with pytest.raises(UnsupportedError, match="prepared by apply\\(\\) already"):  # pruned twice: 0.75, not 0.5
        apply(prepared.module, {"pruning": "l1_unstructured"}, device="cpu")
    pruned = mlp()
    torch.nn.utils.prune.l1_unstructured(pruned[1], "weight", amount=0.5)
    with pytest.raises(UnsupportedError, match="already carries pruning masks"):
        apply(pruned, {"pruning": "l1_unstructured"}, device="cpu")
    apply(pruned, {}, device="cpu")  # its own pruning, and a configuration that does not prune: fine
    with pytest.raises(UnsupportedError, match="already wrapped \\(torch.compile\\)"):
        apply(torch.compile(mlp()), {"compile": True}, device="cpu")
    with pytest.raises(UnsupportedError, match="autocasts over fp32 weights, and this model's weights are "
                                               r"bfloat16 \(as model\(\) builds them, or cast since\): build them "
                                               "in float32 for autocast"):
        apply(mlp().to(torch.bfloat16), {"precision": "bf16"}, device="cpu")
    (tmp_path / "best.yaml").write_text("config: {}\n")
    for config, device, model, expected in (
            (str(tmp_path / "best.yaml"), "cpu", mlp(), "read the file first, advisor.apply\\(model, "
                                                         "advisor.load_config\\("),
            (None, "cpu", mlp(), "config must be a TrialConfig or a mapping of knob: value .* found NoneType"),
            ({}, "gpu", mlp(), "device 'gpu' is not a torch device"),
            ({}, "cpu", "model", "model must be a torch.nn.Module, found str")):
        with pytest.raises(AdvisorError, match=expected):
            apply(model, config, device=device)
    if not torch.cuda.is_available():
        with pytest.raises(UnsupportedError, match="device 'cuda', but torch sees no CUDA device here"):
            apply(mlp(), {}, device="cuda")


def test_accumulation_over_a_loaders_last_short_batch_of_dict_inputs():
    """The README's loop over ``prepared.loader`` (drop_last=False) ends on a short batch:
    fewer samples than micro-batches. With dict (or tuple) inputs that crashed inside
    advisor (IndexError); it now takes one micro-batch per sample."""

    class Masked(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(4, 3)

        def forward(self, x, mask):
            return self.linear(x * mask)

    prepared = apply(Masked(), {"batch_size": 64, "grad_accumulation": 4}, device="cpu")
    items = [({"x": torch.randn(4), "mask": torch.ones(4)}, i % 3) for i in range(66)]
    optimizer = sgd(prepared)
    steps = [float(prepared.train_step(x, y, nn.functional.cross_entropy, optimizer))
             for x, y in prepared.loader(items, shuffle=True)]
    assert len(steps) == 2 and all(math.isfinite(s) for s in steps)  # 64, then the last 2


def test_the_readme_training_loop_runs_as_the_trials_train(monkeypatch):
    """README's apply() loop, as written there, on a BatchNorm model whose training set ends
    in a batch of one item (513 samples, batch 32, accumulation 4): a review's copy of the
    loop kept that batch (drop_last was not said) and BatchNorm refused it."""
    import re

    from conftest import REPO

    text = (REPO / "README.md").read_text()
    code = re.search(r"In your code:\n\n```python\n(.*?)```", text, re.S).group(1)
    assert "prepared.loader(train_set, shuffle=True, drop_last=True)" in code
    config = TrialConfig(batch_size=32, grad_accumulation=4)
    monkeypatch.setattr(advisor, "load_config", lambda path: config)
    model = nn.Sequential(nn.Linear(8, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 3))
    g = torch.Generator().manual_seed(0)
    train_set = torch.utils.data.TensorDataset(torch.randn(513, 8, generator=g), torch.randint(0, 3, (513,), generator=g))
    scope = {"model": model, "train_set": train_set, "loss_fn": nn.functional.cross_entropy, "epochs": 2,
             "torch": torch}
    exec(code, scope)
    assert scope["prepared"].module is model and len(scope["loader"]) == 513 // 32
