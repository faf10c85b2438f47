"""Quantization through torchao: QAT int8 for training, int8 dynamic / weight-only for
inference on CPU; int4 and fp8 are CUDA paths (tests skip here)."""

from __future__ import annotations

import pytest
import torch

from advisor.core.errors import UnsupportedError
from advisor.techniques.prepare import apply
from advisor.techniques.quantization import quantized_layers

from technique_case import DECLARED, TechniqueCase, cpu_node, digits_batches, digits_model

QUANTIZATION_REFUSALS = frozenset(
    {(v, "inference") for v in ("qat_int8", "fp8_training")}
    | {(v, "train") for v in ("int8_dynamic", "int8_weight_only", "int4_weight_only", "fp8")})


def _linears(module):
    return [m for m in module.modules() if isinstance(m, torch.nn.Linear)]


def _accuracy(prepared):
    from advisor.workload.contract import load_datasets, load_workload

    from conftest import EXAMPLES

    _, val = load_datasets(load_workload(EXAMPLES / "digits_inference.py"))
    x, y = val.tensors
    with torch.inference_mode():
        return float((prepared.predict(x).argmax(1).cpu() == y).float().mean())


class TestInferenceQuantization(TechniqueCase):
    key = "quantization"
    apply_values = ("int8_dynamic", "int8_weight_only")
    workload_refusals = QUANTIZATION_REFUSALS
    workload = "inference"
    example = "digits_inference.py"

    def check_applied(self, prepared, value):
        linears = _linears(prepared.module)
        assert all(type(m.weight) is not torch.nn.Parameter for m in linears)  # torchao tensors now
        assert quantized_layers(prepared.module) == len(linears) == 4


def test_int8_dynamic_model_still_classifies_digits():
    fp32 = _accuracy(apply(digits_model("digits_inference.py"), {}, "cpu", workload="inference"))
    int8 = _accuracy(apply(digits_model("digits_inference.py"), {"quantization": "int8_dynamic"}, "cpu",
                           workload="inference"))
    assert fp32 > 0.85
    assert abs(int8 - fp32) < 0.03


class TestQat(TechniqueCase):
    key = "quantization"
    apply_values = ("qat_int8",)
    workload_refusals = QUANTIZATION_REFUSALS

    def check_applied(self, prepared, value):
        # after finish(): fake quantization converted to real int8 weights
        assert quantized_layers(prepared.module) == len(_linears(prepared.module)) == 2


def test_qat_trains_with_fake_quantized_linears():
    from torchao.quantization.qat import FakeQuantizedLinear

    prepared = apply(digits_model(), {"quantization": "qat_int8"}, "cpu")
    assert all(isinstance(m, FakeQuantizedLinear) for m in _linears(prepared.module))
    assert len(prepared.finishers) == 1  # the conversion waits for the end of training


def test_qat_keeps_pruning_masks():
    from advisor.workload.structure import prunable

    prepared = apply(digits_model(), {"quantization": "qat_int8", "pruning": "l1_unstructured"}, "cpu")
    fc = [m for _, m in prunable(prepared.module) if isinstance(m, torch.nn.Linear)]
    assert fc and all(hasattr(m, "weight_mask") for m in fc)  # re-attached after the QAT swap
    optimizer = torch.optim.AdamW(prepared.module.parameters(), lr=1e-2)
    for x, y in digits_batches(count=2):
        prepared.train_step(x, y, torch.nn.functional.cross_entropy, optimizer)
    masks = [m.weight_mask.clone() for m in fc]
    prepared.finish()
    layers = [m for _, m in prunable(prepared.module) if isinstance(m, torch.nn.Linear)]
    assert quantized_layers(prepared.module) == 2
    for layer, mask in zip(layers, masks, strict=True):  # the pruned weights are still zero in int8
        assert torch.all(layer.weight.dequantize()[mask == 0] == 0)
        assert torch.any(layer.weight.dequantize()[mask == 1] != 0)


def test_a_model_without_linear_layers_is_refused():
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.Flatten())
    with pytest.raises(UnsupportedError, match="nn.Linear"):
        apply(model, {"quantization": "int8_dynamic"}, "cpu", workload="inference")


def test_capabilities_of_cuda_only_options():
    from advisor.techniques.registry import TECHNIQUES

    q = TECHNIQUES["quantization"]
    for value in ("fp8", "fp8_training"):
        assert "8.9" in q.unavailable(value, DECLARED["8-core CPU"])
        assert "8.9" in q.unavailable(value, DECLARED["A100"])
        assert q.unavailable(value, DECLARED["8x H100"]) is None
    assert "CUDA" in q.unavailable("int4_weight_only", DECLARED["8-core CPU"])
    assert q.unavailable("int4_weight_only", DECLARED["A100"]) is None
    assert "torchao" in q.unavailable("int8_dynamic", cpu_node(torchao=None))


def _capability_below(cap):
    return not torch.cuda.is_available() or torch.cuda.get_device_capability() < cap


def test_fp8_per_tensor_leaves_a_128x128_weight_as_it_is():
    """torchao 0.18 reads a per-tensor scale of a 128x128 weight as 128x128 blocks, then its
    matmul refuses the input (found on an H200): such a layer is not given to it."""
    from advisor.techniques.quantization import _quantizable

    tensorwise, rowwise = _quantizable("fp8", "tensorwise"), _quantizable("fp8", "rowwise")
    square, wide, odd = torch.nn.Linear(128, 128), torch.nn.Linear(128, 256), torch.nn.Linear(100, 128)
    assert not tensorwise(square, "l") and tensorwise(wide, "l") and rowwise(square, "l")
    assert not tensorwise(odd, "l") and not rowwise(odd, "l")


@pytest.mark.cuda
@pytest.mark.skipif(_capability_below((8, 9)), reason="fp8 needs compute capability >= 8.9")
@pytest.mark.parametrize("scaling", ["tensorwise", "rowwise"])
def test_cuda_fp8_inference_with_a_128x128_layer(scaling):
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 16))
    prepared = apply(model, {"quantization": "fp8", "fp8_scaling": scaling, "precision": "bf16_full"}, "cuda",
                     workload="inference")
    assert quantized_layers(prepared.module) == (3 if scaling == "rowwise" else 2)
    with torch.inference_mode():
        assert torch.isfinite(prepared.predict(torch.randn(32, 64)).float()).all()


@pytest.mark.cuda
@pytest.mark.parametrize("value", [
    pytest.param("fp8", marks=pytest.mark.skipif(_capability_below((8, 9)), reason="fp8 needs compute capability >= 8.9")),
    pytest.param("int4_weight_only", marks=pytest.mark.skipif(_capability_below((8, 0)),
                                                              reason="int4 (tinygemm) needs compute capability >= 8.0")),
])
def test_cuda_inference_quantization(value):
    prepared = apply(digits_model("digits_inference.py"), {"quantization": value, "precision": "bf16_full"},
                     "cuda", workload="inference")
    assert _accuracy(prepared) > 0.8


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9),
                    reason="needs a CUDA GPU with compute capability >= 8.9")
def test_fp8_training_on_cuda():
    """Every Linear whose sizes fp8 matmuls take becomes a Float8Linear; the model trains
    (finite losses) and still classifies after a few steps."""
    prepared = apply(digits_model("digits_inference.py"), {"quantization": "fp8_training", "precision": "bf16"}, "cuda")
    converted = [m for m in prepared.module.modules() if type(m).__name__ == "Float8Linear"]
    assert converted and quantized_layers(prepared.module) == len(converted)
    optimizer = torch.optim.AdamW(prepared.module.parameters())
    losses = [float(prepared.train_step(x, y, torch.nn.functional.cross_entropy, optimizer))
              for x, y in digits_batches("digits_inference.py", batch_size=64)]
    assert losses and all(torch.isfinite(torch.tensor(losses)))
    with torch.inference_mode():
        assert prepared.predict(digits_batches("digits_inference.py", batch_size=64)[0][0]).shape == (64, 10)

def test_an_fp8_trained_model_is_evaluated_under_inference_mode(monkeypatch):
    """Evaluation runs under torch.inference_mode (the trial's loop, the latency probe); with
    autocast there, torchao 0.18's float8 training tensors meet an aten.to.dtype they do not
    implement (seen on an H100). ``predict`` steps out to no_grad for them. On this CPU,
    torchao's emulated fp8 matmul stands in for the GPU's."""
    import dataclasses

    import advisor.techniques.quantization as quantization

    real = quantization.float8_config
    monkeypatch.setattr(quantization, "float8_config", lambda p: dataclasses.replace(real(p), emulate=True))
    prepared = apply(digits_model("digits_inference.py"), {"quantization": "fp8_training", "precision": "bf16"}, "cpu")
    assert quantized_layers(prepared.module) > 0
    optimizer = torch.optim.AdamW(prepared.module.parameters())
    x, y = digits_batches("digits_inference.py", batch_size=64)[0]
    assert torch.isfinite(prepared.train_step(x, y, torch.nn.functional.cross_entropy, optimizer))
    with torch.inference_mode():
        assert prepared.predict(x).shape == (64, 10)
    assert _accuracy(prepared) > 0.5


@pytest.mark.parametrize("rows", [8, 12])
def test_fp8_training_takes_small_per_rank_batches(rows):
    """The weight gradient's inner dimension is the rows of a per-rank micro-batch (batch 32
    over 4 ranks: 8; 48 in 4 micro-batches: 12); torch's fp8 matmul needs a multiple of 16,
    so the config pads it (torchao's pad_inner_dim). Run on meta tensors: torch's own shape
    rules for the fp8 matmul, which hold on any device, with no GPU needed."""
    pytest.importorskip("torchao")
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 32))
    prepared = apply(model, {"quantization": "fp8_training", "batch_size": rows}, "meta")
    assert quantized_layers(prepared.module) == 2
    assert all(m.config.pad_inner_dim for m in prepared.module.modules() if type(m).__name__ == "Float8Linear")
    x = torch.randn(rows, 32, device="meta", requires_grad=True)
    prepared.model(x).sum().backward()  # unpadded: "Expected self.size(1) to be divisible by 16"
    assert prepared.module[0].weight.grad.shape == (64, 32)


def test_fp8_training_all_gathers_in_fp8_under_fsdp():
    """Under FSDP2 the fp8 config all-gathers the weights in fp8 (tensorwise scaling)."""
    pytest.importorskip("torchao")
    from advisor.core.config import TrialConfig
    from advisor.techniques.prepared import Prepared
    from advisor.techniques.quantization import float8_config

    def config_for(parallelism):
        cfg = TrialConfig(quantization="fp8_training", parallelism=parallelism, devices=2 if parallelism != "single" else 1)
        return float8_config(Prepared(model=None, module=None, device=torch.device("cpu"), config=cfg))

    assert config_for("fsdp").enable_fsdp_float8_all_gather and config_for("fsdp").pad_inner_dim
    assert not config_for("ddp").enable_fsdp_float8_all_gather


def test_layers_with_parametrized_weights_keep_their_precision():
    """weight_norm / spectral_norm compute a layer's weight: torchao's swaps failed on them
    ("cannot assign 'torch.FloatTensor' as parameter 'weight'", a reviewer's QAT trial).
    The plain layers are quantized, the parametrized ones left; a model with none plain
    is told before its trials run."""
    from torch.nn.utils.parametrizations import spectral_norm, weight_norm

    from advisor.techniques.quantization import Quantization

    def model():
        return torch.nn.Sequential(weight_norm(torch.nn.Linear(16, 64)), torch.nn.ReLU(),
                                   spectral_norm(torch.nn.Linear(64, 64)), torch.nn.ReLU(), torch.nn.Linear(64, 2))

    x, y = torch.randn(32, 16), torch.randint(0, 2, (32,))
    qat = apply(model(), {"quantization": "qat_int8", "batch_size": 32}, "cpu")
    qat.train_step(x, y, torch.nn.functional.cross_entropy, torch.optim.AdamW(qat.module.parameters()))
    qat.finish()
    assert quantized_layers(qat.module) == 1 and torch.isfinite(qat.predict(x)).all()
    dynamic = apply(model(), {"quantization": "int8_dynamic"}, "cpu", workload="inference")
    assert quantized_layers(dynamic.module) == 1 and torch.isfinite(dynamic.predict(x)).all()
    facts = {"linear_layers": 2, "own_weight_linear_layers": 0, "parametrized_layers": ["0", "2"]}
    assert "its Linear layers 0, 2 have parametrized weights" in Quantization().pointless("qat_int8", facts)
    assert Quantization().pointless("qat_int8", facts | {"own_weight_linear_layers": 1}) is None
