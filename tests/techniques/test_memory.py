"""Activation checkpointing and gradient accumulation, on real models and digits."""

from __future__ import annotations

import pytest
import torch

from advisor.core.errors import UnsupportedError
from advisor.techniques.prepare import apply

from technique_case import TechniqueCase, digits_batches, digits_model


class TestActivationCheckpointing(TechniqueCase):
    key = "activation_checkpointing"
    apply_values = (True,)
    workload_refusals = frozenset({(True, "inference")})
    invalid_values = ("yes", 1, None)

    def check_applied(self, prepared, value):
        from advisor.workload.structure import blocks

        assert all("forward" in vars(b) for b in blocks(prepared.module))  # patched per block


def _grads(prepared, x, y):
    prepared.module.zero_grad()
    optimizer = torch.optim.SGD(prepared.module.parameters(), lr=0.0)  # step changes nothing
    prepared.train_step(x, y, torch.nn.functional.cross_entropy, optimizer)
    return [p.grad.clone() for p in prepared.module.parameters()]


def test_checkpointing_gives_the_same_gradients():
    (x, y), = digits_batches(count=1)
    plain = _grads(apply(digits_model(), {}, "cpu"), x, y)
    ckpt = _grads(apply(digits_model(), {"activation_checkpointing": True}, "cpu"), x, y)
    for a, b in zip(plain, ckpt):
        torch.testing.assert_close(a, b)


def _norm_buffers(module):
    return {k: v.clone() for k, v in module.state_dict().items()
            if k.endswith(("running_mean", "running_var", "num_batches_tracked"))}


@pytest.mark.parametrize("momentum", [0.1, None])  # None: cumulative average, counts batches
def test_checkpointing_updates_batchnorm_statistics_once(momentum):
    """The recomputation in backward runs BatchNorm in training mode again; it must not
    update the running statistics a second time (the digits CNN has three BatchNorms:
    doubled updates changed its evaluated accuracy by up to 37 points on the grid)."""
    (x, y), = digits_batches(count=1)
    models = []
    for value in (False, True):
        model = digits_model()
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.momentum = momentum
        prepared = apply(model, {"activation_checkpointing": value}, "cpu")
        for _ in range(3):
            _grads(prepared, x, y)
        models.append(prepared.module)
    plain, ckpt = (_norm_buffers(m) for m in models)
    assert plain.keys() == ckpt.keys() and any(k.endswith("running_mean") for k in plain)
    for key in plain:
        torch.testing.assert_close(ckpt[key], plain[key], msg=key)
    norms = [m for m in models[1].modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    assert all(m.momentum == momentum for m in norms)  # restored after each recomputation


def test_checkpointing_under_compile_trains_and_updates_batchnorm_statistics_once():
    """torch.compile traces the checkpointed blocks (a context_fn there must be dispatch
    modes, so none is passed); the compiled recomputation replays no buffer update."""
    (x, y), = digits_batches(count=1)
    models = []
    for value in (False, True):
        prepared = apply(digits_model(), {"activation_checkpointing": value, "compile": True}, "cpu")
        for _ in range(2):
            _grads(prepared, x, y)
        models.append(prepared.module)
    plain, ckpt = (_norm_buffers(m) for m in models)
    for key in plain:
        torch.testing.assert_close(ckpt[key], plain[key], msg=key)


def test_checkpointing_refuses_a_model_without_blocks():
    model = torch.nn.Sequential(torch.nn.Linear(64, 10))
    with pytest.raises(UnsupportedError, match="the model.s blocks"):
        apply(model, {"activation_checkpointing": True}, "cpu")


class TestGradAccumulation(TechniqueCase):
    key = "grad_accumulation"
    apply_values = (2, 4)
    workload_refusals = frozenset({(2, "inference"), (4, "inference"), (8, "inference")})
    invalid_values = (0, -1, 1.5, "two", True)

    def check_applied(self, prepared, value):
        assert prepared.accumulation == value


def test_accumulated_gradients_equal_the_full_batch_gradients():
    """The MLP has no BatchNorm, so micro-batches give exactly the full batch's mean gradient."""
    (x, y), = digits_batches("digits_mlp.py", batch_size=32, count=1)
    full = _grads(apply(digits_model("digits_mlp.py"), {"batch_size": 32}, "cpu"), x, y)
    accumulated = _grads(apply(digits_model("digits_mlp.py"), {"batch_size": 32, "grad_accumulation": 4}, "cpu"), x, y)
    for a, b in zip(full, accumulated):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_batch_that_does_not_split_is_refused():
    with pytest.raises(UnsupportedError, match="does not split evenly"):
        apply(digits_model(), {"batch_size": 30, "grad_accumulation": 4}, "cpu")
