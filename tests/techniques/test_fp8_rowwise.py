"""fp8 training with rowwise scales (``fp8_scaling: rowwise``) on a model whose Linear gets
an input that is not contiguous: the doctor's built-in model, whose attention layer feeds
its qkv projection the pixels transposed to tokens (``x.flatten(2).transpose(1, 2)``).

On an H100 (torch 2.11, torchao 0.18) ``advisor doctor`` failed there with ``AssertionError:
aten.clone.default with axiswise scaling is not supported yet``: torchao's Float8Linear
flattens its input after the cast to fp8, and a rowwise fp8 tensor cannot be copied.
No GPU here: torchao's emulated fp8 (``Float8LinearConfig(emulate=True)``) runs the same
Float8Linear, casts and op table on the CPU, with the matmul done in high precision; the
fixture ``emulated_fp8_stands_in_for_the_gpu`` patches it into advisor's fp8 config.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from advisor.techniques.prepare import apply

from conftest import skip_without

skip_without("torchao")


@pytest.fixture
def emulated_fp8_stands_in_for_the_gpu(monkeypatch):
    """advisor's fp8 training config with torchao's emulation on: a stand-in for an fp8 GPU."""
    from advisor.techniques import quantization

    real = quantization.float8_config
    monkeypatch.setattr(quantization, "float8_config", lambda prepared: dataclasses.replace(real(prepared),
                                                                                           emulate=True))


def _builtin(tmp_path):
    """The doctor's built-in model, copied as the doctor copies it (``builtin_subject``)."""
    from pathlib import Path

    from advisor.workload import doctor_model
    from advisor.workload.contract import load_datasets, load_workload

    path = tmp_path / "tiny_model.py"
    path.write_text(Path(doctor_model.__file__).read_text())
    workload = load_workload(path)
    return workload, load_datasets(workload)


def test_torchao_cannot_copy_a_rowwise_fp8_tensor():
    """The cause, in torchao alone: a rowwise Float8Linear fails on a transposed 3-D input
    (its reshape copies the fp8 tensor), and runs on the same input made contiguous. When a
    torchao release copies rowwise fp8 tensors, this fails: the pre-hook of
    ``advisor.techniques.quantization._contiguous_inputs`` can then go."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    config = dataclasses.replace(Float8LinearConfig.from_recipe_name("rowwise"), emulate=True, pad_inner_dim=True)
    model = convert_to_float8_training(torch.nn.Sequential(torch.nn.Linear(16, 48)), config=config)
    x = torch.randn(4, 16, 64).transpose(1, 2)
    with pytest.raises(AssertionError, match="aten.clone.default with axiswise scaling is not supported"):
        model(x)
    assert model(x.contiguous()).shape == (4, 64, 48)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("scaling", ["tensorwise", "rowwise"])
def test_fp8_training_trains_the_builtin_model(tmp_path, emulated_fp8_stands_in_for_the_gpu, scaling, precision):
    """The doctor's run of ``fp8_scaling: rowwise`` (the reference's fp32, as the doctor pairs
    it, and bf16) through the functions a trial uses: ``apply``, the trial's training batches
    and ``Prepared.train_step``; then a forward for evaluation, under no_grad (under
    inference_mode fp8 training's forward has a failure of its own, fixed in ``Prepared``)."""
    from advisor.trial.shared import check_finite, training_batches
    from advisor.workload.contract import build_model

    workload, (train, val) = _builtin(tmp_path)
    config = {"batch_size": 64, "quantization": "fp8_training", "fp8_scaling": scaling, "precision": precision}
    torch.manual_seed(0)
    prepared = apply(build_model(workload), config, "cpu")
    layers = [m for m in prepared.module.modules() if type(m).__name__ == "Float8Linear"]
    assert len(layers) == 4 and all(m.config.emulate for m in layers)  # qkv, out, and the two of the head
    optimizer = workload.optimizer(prepared.module.parameters())
    batches = training_batches(prepared, workload, train, 0)
    for i in range(3):
        x, y = next(batches)
        check_finite(prepared.train_step(x, y, workload.loss, optimizer), i)
    prepared.model.eval()
    x, _ = val[:64]
    with torch.inference_mode():
        assert prepared.predict(x).shape == (64, 16)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9),
                    reason="needs a CUDA GPU with compute capability >= 8.9")
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_rowwise_fp8_training_on_cuda(tmp_path, precision):
    """The H100's failure itself: the built-in model trains with rowwise fp8 on the GPU."""
    from advisor.trial.shared import training_batches
    from advisor.workload.contract import build_model

    workload, (train, _) = _builtin(tmp_path)
    prepared = apply(build_model(workload), {"batch_size": 64, "quantization": "fp8_training",
                                             "fp8_scaling": "rowwise", "precision": precision}, "cuda")
    optimizer = workload.optimizer(prepared.module.parameters())
    batches = training_batches(prepared, workload, train, 0)
    losses = [float(prepared.train_step(*next(batches), workload.loss, optimizer)) for _ in range(3)]
    assert all(torch.isfinite(torch.tensor(losses)))
