"""apply(): turn a TrialConfig into a prepared model and training step (``Prepared``).

Trials and users share this one code path, so an exported config reproduces exactly the
setup that was measured::

    prepared = advisor.apply(model, advisor.load_config("best.yaml"))
    optimizer = torch.optim.AdamW(prepared.module.parameters())
    for x, y in prepared.loader(train_set, shuffle=True):   # the configured batch / workers
        prepared.train_step(x, y, loss_fn, optimizer)
    prepared.finish()                        # make pruning permanent, convert QAT to int8
"""

from __future__ import annotations

from typing import Any

from advisor.core.config import TrialConfig
from advisor.core.errors import UnsupportedError
from advisor.core.results import check_workload_kind
from advisor.techniques.conv1d import conv1d_to_linear, needs_linear
from advisor.techniques.prepared import Prepared, default_device
from advisor.techniques.registry import TECHNIQUES
from advisor.techniques.rules import refusal


def apply(model: Any, config: TrialConfig | dict[str, Any], device: Any = None, workload: str = "train", *,
          tp_plan: dict[str, Any] | None = None, pipeline_split: list[str] | None = None,
          example_inputs: Any = None) -> Prepared:
    """Prepare ``model`` for ``config``: threads, precision, device, memory format, pruning,
    quantization, checkpointing, data parallelism, compile, in that order. With
    quantization or 2:4 sparsity, transformers' Conv1D layers (GPT-2) are first replaced
    by equal nn.Linear layers (``Prepared.conv1d_swapped``; advisor/techniques/conv1d.py).

    Args:
        model: the user's ``nn.Module`` (moved to ``device`` in place).
        config: a TrialConfig, or a mapping of knob values (validated).
        device: defaults to the current CUDA device when there is one, else the CPU.
        workload: "train", or "inference" (the model is put in eval mode; inference-only
            options such as int8_dynamic or bf16_full are allowed, training ones refused).
        tp_plan: for ``parallelism`` tp / fsdp_tp, your model.py's ``tp_plan()`` (layer name
            -> style); None derives the plan from the model (or its transformers plan).
        pipeline_split: for ``parallelism: pp``, your model.py's ``pipeline_split()`` (the
            layers where a stage may begin); None cuts at the model's blocks.
        example_inputs: for ``parallelism: pp``, one batch of inputs (any size): the model is
            traced on a micro-batch of it and split into stages here, else at the first step.

    Returns:
        A Prepared whose ``train_step`` / ``predict`` run the configured step.

    Raises:
        ConfigError: ``config`` holds an unknown knob or an invalid value, or ``workload``
            is neither "train" nor "inference".
        UnsupportedError: a technique refuses this model (e.g. channels_last without convs)
            or the values cannot be combined (anywhere, or on ``device``: the CUDA flash
            attention kernel with fp32).
    """
    import torch

    check_workload_kind(workload, "apply(): workload")
    if not isinstance(config, TrialConfig):
        config = TrialConfig.from_dict(dict(config))
    device = torch.device(device) if device is not None else default_device()
    reason = refusal(config, workload, device.type)
    if reason:
        raise UnsupportedError(reason)
    values = config.to_dict()
    hints = {"tp_plan": tp_plan, "pipeline_split": pipeline_split, "example_inputs": example_inputs}
    prepared = Prepared(model=model, module=model, device=device, config=config, workload=workload, hints=hints)
    if any(t.device != device for t in (*model.parameters(), *model.buffers())):
        move(model, device)
    if workload == "inference":
        model.eval()
    if needs_linear(config):  # torchao and the 2:4 kernels take nn.Linear only: GPT-2's Conv1D become ones
        prepared.conv1d_swapped = conv1d_to_linear(model)
        if prepared.conv1d_swapped:
            prepared.stats["conv1d_as_linear"] = len(prepared.conv1d_swapped)
    for key, technique in TECHNIQUES.items():  # ordered: threads, precision, ..., compile
        technique.apply(values[key], prepared)
    return prepared


def move(model: Any, device: Any) -> None:
    """``model.to(device)``, also for a model built on fake tensors (the memory estimate's):
    ``Module.to`` swaps a fake parameter in place (``torch.utils.swap_tensors``), which the
    weak reference fake mode keeps to it forbids ("Couldn't swap Linear.weight"; every
    estimate on CUDA was unavailable so, issue 27). A fake model's parameters and buffers
    are replaced by moved ones instead, tied ones staying tied."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    if not any(isinstance(t, FakeTensor) for t in (*model.parameters(), *model.buffers())):
        model.to(device)
        return
    moved: dict[int, Any] = {}
    for module in model.modules():
        for key, param in module._parameters.items():
            if param is not None and param.device != device:
                if id(param) not in moved:
                    moved[id(param)] = torch.nn.Parameter(param.detach().to(device), requires_grad=param.requires_grad)
                module._parameters[key] = moved[id(param)]
        for key, buffer in module._buffers.items():
            if buffer is not None and buffer.device != device:
                module._buffers[key] = moved.setdefault(id(buffer), buffer.to(device))
        if isinstance(getattr(module, "_device", None), torch.device):  # a LightningModule's .device
            module._device = device

