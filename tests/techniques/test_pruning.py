"""Pruning: masks keep pruned weights zero through training, then become permanent."""

from __future__ import annotations

import pytest
import torch

from advisor.core.errors import UnsupportedError
from advisor.techniques.prepare import apply
from advisor.techniques.pruning import mask_2_4, semi_structured_shape_ok, sparsity
from advisor.workload.structure import prunable

from technique_case import DECLARED, TechniqueCase, digits_batches, digits_model


def _train(prepared, steps=3, example="digits_cnn.py"):
    optimizer = torch.optim.AdamW(prepared.module.parameters(), lr=1e-2)
    for x, y in digits_batches(example, count=steps):
        prepared.train_step(x, y, torch.nn.functional.cross_entropy, optimizer)


class TestPruning(TechniqueCase):
    key = "pruning"
    apply_values = ("l1_unstructured", "ln_structured")
    extra = {"prune_amount": 0.5}

    def check_applied(self, prepared, value):
        layers = prunable(prepared.module)
        assert layers, "digits_cnn has layers to prune"
        for _, layer in layers:  # permanent: plain parameters, no masks left
            assert "weight_orig" not in dict(layer.named_parameters())
        facts = sparsity(prepared.module)
        assert facts["sparsity"] == pytest.approx(0.5, abs=0.02)
        assert facts["nonzero_parameters"] < facts["parameters"]


def test_pruned_weights_stay_zero_through_training_and_after():
    prepared = apply(digits_model(), {"pruning": "l1_unstructured", "prune_amount": 0.5}, "cpu")
    masks = {n: l.weight_mask.clone() for n, l in prunable(prepared.module)}
    _train(prepared)
    for name, layer in prunable(prepared.module):
        assert torch.all(layer.weight[masks[name] == 0] == 0)  # zero while training
        assert torch.any(layer.weight_orig[masks[name] == 0] != 0)  # the optimizer did move them
    prepared.finish()
    for name, layer in prunable(prepared.module):
        assert torch.all(layer.weight[masks[name] == 0] == 0)  # and permanently zero


def test_a_pruned_model_counts_its_zeros_before_and_after_they_are_made_permanent():
    """A probe times the model with its masks still on (only a training run makes them
    permanent): the non-zero count is the masked weights', not the dense originals' (a
    probed-only trial once reported every parameter as non-zero)."""
    dense = sparsity(digits_model())
    prepared = apply(digits_model(), {"pruning": "l1_unstructured", "prune_amount": 0.5}, "cpu")
    _train(prepared)
    masked = sparsity(prepared.module)
    prepared.finish()
    permanent = sparsity(prepared.module)
    assert masked["parameters"] == permanent["parameters"] == dense["parameters"]
    assert masked["nonzero_parameters"] == permanent["nonzero_parameters"] < dense["nonzero_parameters"]
    assert masked["sparsity"] == permanent["sparsity"] == pytest.approx(0.5, abs=0.02)


@pytest.mark.parametrize("method", ["l1_unstructured", "ln_structured"])
def test_pruning_a_channels_last_model(method):
    """Found by a real `--space cpu` study: torch's prune flattened channels_last weights with view()."""
    prepared = apply(digits_model(), {"pruning": method, "prune_amount": 0.5, "channels_last": True}, "cpu")
    _train(prepared)
    prepared.finish()
    assert sparsity(prepared.module)["sparsity"] == pytest.approx(0.5, abs=0.02)


def test_the_output_layer_stays_dense():
    prepared = apply(digits_model(), {"pruning": "l1_unstructured", "prune_amount": 0.75}, "cpu")
    prepared.finish()
    last = [m for m in prepared.module.modules() if isinstance(m, torch.nn.Linear)][-1]
    assert torch.count_nonzero(last.weight) == last.weight.numel()


def test_structured_pruning_zeroes_whole_output_channels():
    prepared = apply(digits_model(), {"pruning": "ln_structured", "prune_amount": 0.25}, "cpu")
    _train(prepared)
    prepared.finish()
    for _, layer in prunable(prepared.module):
        rows = layer.weight.flatten(1)
        zero_rows = int((rows.abs().sum(dim=1) == 0).sum())
        assert zero_rows == round(0.25 * rows.shape[0])


def test_two_of_every_four_mask():
    weight = torch.randn(8, 16)
    mask = mask_2_4(weight)
    assert mask.reshape(8, 4, 4).sum(dim=-1).eq(2).all()
    kept = weight.abs().reshape(8, 4, 4)[mask.reshape(8, 4, 4)].reshape(8, 4, 2)
    dropped = weight.abs().reshape(8, 4, 4)[~mask.reshape(8, 4, 4)].reshape(8, 4, 2)
    assert (kept.min(dim=-1).values >= dropped.max(dim=-1).values).all()


def test_2_4_pattern_holds_after_training_on_cpu():
    """The masks work on CPU (the sparse kernels need CUDA; the search offers 2:4 only there)."""
    prepared = apply(digits_model("digits_inference.py"), {"pruning": "semi_structured_2_4"}, "cpu")
    _train(prepared, example="digits_inference.py")
    prepared.finish()
    for _, layer in prunable(prepared.module):
        groups = (layer.weight != 0).reshape(layer.weight.shape[0], -1, 4).sum(dim=-1)
        assert (groups <= 2).all()


def test_2_4_is_refused_without_an_ampere_gpu():
    from advisor.techniques.registry import TECHNIQUES

    t = TECHNIQUES["pruning"]
    assert "CUDA" in t.unavailable("semi_structured_2_4", DECLARED["8-core CPU"])
    assert "8.0" in t.unavailable("semi_structured_2_4", DECLARED["T4"])
    assert t.unavailable("semi_structured_2_4", DECLARED["A100"]) is None


def test_a_model_with_one_layer_has_nothing_to_prune():
    with pytest.raises(UnsupportedError, match="output layer is kept dense"):
        apply(torch.nn.Sequential(torch.nn.Linear(64, 10)), {"pruning": "l1_unstructured"}, "cpu")


class TestPruneAmount(TechniqueCase):
    key = "prune_amount"
    apply_values = (0.25, 0.75)
    extra = {"pruning": "l1_unstructured"}
    invalid_values = (0.0, 1.0, 1, "half", None)
    snippet_via = ("pruning", "AMOUNT")

    def check_applied(self, prepared, value):
        assert sparsity(prepared.module)["sparsity"] == pytest.approx(value, abs=0.01)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 0),
                    reason="needs a CUDA GPU with compute capability >= 8.0")
def test_2_4_sparse_kernels_on_cuda():
    model = digits_model("digits_inference.py")
    prepared = apply(model, {"pruning": "semi_structured_2_4", "precision": "bf16_full", "batch_size": 128},
                     "cuda", workload="inference")
    assert prepared.stats["semi_structured_layers"] >= 1
    with torch.inference_mode():
        assert prepared.predict(torch.rand(128, 64)).shape == (128, 10)


SHAPES_2_4 = {(16, 16): True, (64, 48): True, (128, 64): True, (16, 8): False, (24, 64): False, (8, 16): False,
             (10, 32): False}


def test_2_4_shapes_are_the_ones_torchs_kernel_takes():
    """torch's default 2:4 backend (cuSPARSELt) takes fp16 / bf16 weights whose sizes are
    multiples of 16 (torch/sparse/semi_structured.py); the old rule (multiples of 64) left
    such layers dense, e.g. the digits model's 64 x 48 hidden layer."""
    for shape, takes in SHAPES_2_4.items():
        assert semi_structured_shape_ok(shape, torch.bfloat16) == takes, shape
        assert semi_structured_shape_ok(shape, torch.float16) == takes, shape
    assert not semi_structured_shape_ok((64, 64, 3), torch.bfloat16)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 0),
                    reason="needs a CUDA GPU with compute capability >= 8.0")
def test_2_4_shape_rule_matches_torch_on_cuda():
    """On a GPU: the rule says yes exactly where torch converts the weight."""
    for shape, takes in SHAPES_2_4.items():
        w = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
        w = w * mask_2_4(w)  # a 2:4 pattern
        try:
            torch.sparse.to_sparse_semi_structured(w)
            converted = True
        except RuntimeError:
            converted = False
        assert converted == takes == semi_structured_shape_ok(shape, torch.bfloat16), shape


@pytest.mark.parametrize("config", [
    {"pruning": "ln_structured", "prune_amount": 0.5},
    {"pruning": "l1_unstructured", "quantization": "qat_int8"},
    {"pruning": "ln_structured", "prune_amount": 0.5, "quantization": "qat_int8", "parallelism": "ddp",
     "devices": 2, "bucket_mb": 100, "grad_accumulation": 4},
], ids=["ln", "l1-qat", "ln-qat-ddp-accumulation"])
def test_pruning_trains_a_transformer_encoder(config):
    """nn.MultiheadAttention reads its output projection's weight without calling it, so the
    mask's hook never ran there and every pruned Transformer trial failed ("backward through
    the graph a second time"; with DDP, "modified by an inplace operation": a combination a
    study proposed). The attention's projections stay dense; the feed-forward layers are pruned."""
    from advisor.core.config import TrialConfig
    from advisor.core.results import TrialPayload, TrialSettings
    from advisor.workload.contract import load_workload

    from conftest import WORKLOADS, run_as_trial

    workload = load_workload(WORKLOADS / "encoder.py")
    names = [n for n, _ in prunable(workload.model())]
    assert names and not any("self_attn" in n for n in names) and any("linear1" in n for n in names)
    result = run_as_trial(TrialPayload.of(workload, TrialConfig(batch_size=16, **config),
                                       TrialSettings(train_samples=512, max_timing_s=1.0)))
    assert result.ok, result.failure_message
    assert result.score > 0.2  # trained (chance: 0.1)
