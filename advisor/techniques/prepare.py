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

import json
import warnings
from typing import Any

from advisor.core.config import TrialConfig
from advisor.core.errors import ConfigError, UnsupportedError
from advisor.core.export_format import measured_model, measured_weights_dtype, measured_workload
from advisor.core.results import check_workload_kind
from advisor.techniques.conv1d import conv1d_to_linear, needs_linear
from advisor.techniques.prepared import Prepared, default_device
from advisor.techniques.registry import TECHNIQUES
from advisor.techniques.rules import refusal
from advisor.workload.structure import dtype_name, weights_dtype


def apply(model: Any, config: TrialConfig | dict[str, Any], device: Any = None, workload: str | None = None, *,
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
            None (the default): what ``config`` was measured for, when ``load_config`` read
            it from a full export; else "train".
        tp_plan: for ``parallelism`` tp / fsdp_tp, your model.py's ``tp_plan()`` (layer name
            -> style); None derives the plan from the model (or its transformers plan).
        pipeline_split: for ``parallelism: pp``, your model.py's ``pipeline_split()`` (the
            layers where a stage may begin); None cuts at the model's blocks.
        example_inputs: for ``parallelism: pp``, one batch of inputs (any size): the model is
            traced on a micro-batch of it and split into stages here, else at the first step.

    Returns:
        A Prepared whose ``train_step`` / ``predict`` run the configured step.

    Raises:
        ConfigError: ``config`` holds an unknown knob or an invalid value, or is not a
            configuration at all (a path: read it with ``load_config``); ``device`` is not a
            torch device; ``model`` is not an nn.Module; ``workload`` is neither "train" nor
            "inference", or is not what the exported ``config`` was measured for (its
            knobs as a mapping, ``config.to_dict()``, are applied to either unmeasured).
        UnsupportedError: a technique refuses this model (e.g. channels_last without convs)
            or the values cannot be combined (anywhere, or on ``device``: the CUDA flash
            attention kernel with fp32); ``device`` is CUDA and torch sees none; the model
            would not become what was measured: apply() prepared it already, it is wrapped
            already (DDP, FSDP, torch.compile), it carries pruning masks and the
            configuration prunes, or its weights are not fp32 under bf16/fp16 autocast.

    Warns (UserWarning) when a value cannot run on ``device`` of this machine, as ``advisor
    tune`` would refuse it there (TF32 or fp8 on a CPU, a CUDA-only kernel): it is applied
    all the same, unmeasured.
    """
    import torch

    config = _config_of(config)
    workload = _workload_of(workload, config)
    device = _device_of(device)
    _check_model(model, config)
    _warn_if_another_model(model, config)
    reason = refusal(config, workload, device.type)
    if reason:
        raise UnsupportedError(reason)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UnsupportedError(f"apply(): device {str(device)!r}, but torch sees no CUDA device here")
    unfit = _device_refusal(config, device)
    if unfit:  # applied all the same: a GPU's export tried on a CPU, the CPU-side of a GPU path
        warnings.warn(f"{unfit}; applied all the same, but what runs here is not what was measured", stacklevel=2)
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
    model.__dict__[APPLIED] = config.key()  # a plain attribute: not a parameter, buffer or submodule
    return prepared


APPLIED = "_advisor_applied"  # set on a model apply() prepared: a second apply() would stack the knobs

# knobs whose rules count a node's devices or cores for ranks: the launcher (torchrun) decides
# those, and the data-parallel techniques check the process group they find
_LAYOUT = ("parallelism", "devices", "tp_size")


def _device_refusal(config: TrialConfig, device: Any) -> str | None:
    """Why a value of ``config`` cannot run on ``device`` of this machine, as ``advisor tune``
    refuses it (the capability table): TF32, fp8 or the CUDA-only kernels on a CPU, a
    compute capability too low, a missing compiler or torchao. A review applied an export
    with TF32 and fp8 training to a CPU model without a word: TF32 did nothing and fp8 ran
    its emulated path. apply() warns (UserWarning) and goes on: such a configuration's CPU
    side still runs (module swaps, masks), which is how a GPU export is tried out on a laptop."""
    from advisor.machine.hardware import on_device

    hw = on_device("cuda" if device.type == "cuda" else "cpu")  # a CPU model on a GPU machine: as a CPU trial
    for key, technique in TECHNIQUES.items():
        if key in _LAYOUT:
            continue
        value = getattr(config, key)
        why = technique.unavailable(value, hw)
        if why:
            return f"apply(): {key}={json.dumps(value)} cannot run on {device} here: {why}"
    return None


def _workload_of(workload: Any, config: TrialConfig) -> str:
    """The workload to prepare for: ``workload``, or what the exported ``config`` was measured
    for; a ConfigError when the two differ (the model would not become what was measured)."""
    measured = measured_workload(config)
    if workload is None:
        return measured or "train"
    check_workload_kind(workload, "apply(): workload")
    if measured is not None and workload != measured:
        raise ConfigError(f"apply(): workload={workload!r}, but this configuration was measured for {measured} "
                          f"(its export's source.workload_kind): leave workload out, or pass "
                          f"workload={measured!r}; to use its knobs for {workload} unmeasured, pass "
                          "config.to_dict()")
    return workload


def _config_of(config: Any) -> TrialConfig:
    """``config`` as a TrialConfig; a ConfigError for anything but one or a mapping."""
    import os
    from collections.abc import Mapping

    if isinstance(config, TrialConfig):
        return config
    if isinstance(config, (str, os.PathLike)):
        raise ConfigError(f"apply(): config is the path {str(config)!r}, expected the configuration: read the "
                          f"file first, advisor.apply(model, advisor.load_config({str(config)!r}))")
    if not isinstance(config, Mapping):
        raise ConfigError(f"apply(): config must be a TrialConfig or a mapping of knob: value (advisor.load_config "
                          f"reads an exported file), found {type(config).__name__}")
    return TrialConfig.from_dict(dict(config))


def _device_of(device: Any) -> Any:
    """``device`` as a torch.device (the default one for None); whether it exists here is
    checked after the configuration's own refusals."""
    import torch

    if device is None:
        return default_device()
    try:
        return torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ConfigError(f"apply(): device {device!r} is not a torch device (expected 'cpu', 'cuda', 'cuda:1', "
                          "a torch.device, or None for the current one)") from None


def _warn_if_another_model(model: Any, config: TrialConfig) -> None:
    """A warning when ``model`` has another parameter count than the model the exported
    ``config`` was measured on (an export from another model.py, a common mix-up: the
    figures under its ``measured`` are of that model). A lazy module's count is not known
    before its first forward: said as such rather than compared."""
    import warnings

    import torch

    found = measured_model(config)
    if found is None:
        return
    if any(isinstance(p, torch.nn.parameter.UninitializedParameter) for p in model.parameters()):
        return
    parameters = sum(p.numel() for p in model.parameters())
    if parameters != found[0]:
        source = f" ({found[1]})" if found[1] else ""
        warnings.warn(f"apply(): this model has {parameters:,} parameters, the one the configuration was measured "
                      f"on{source} had {found[0]:,}: is the export from another model.py? Its figures are of that "
                      "model; the knobs are applied to this one all the same", UserWarning, stacklevel=3)


def _check_model(model: Any, config: TrialConfig) -> None:
    """Refuse what apply() would silently build differently from what was measured: not a
    module, a module apply() already prepared, one already wrapped (DDP, FSDP, compiled), one
    already pruned when the configuration prunes, or one whose weights are no longer fp32
    when the configuration autocasts over fp32 weights, or (an export that records it) no
    longer of the dtype model() built them in."""
    import torch

    if not isinstance(model, torch.nn.Module):
        raise ConfigError(f"apply(): model must be a torch.nn.Module, found {type(model).__name__}")
    bare = "pass the model as model() builds it: apply() adds what the configuration measured"
    if APPLIED in model.__dict__:
        raise UnsupportedError(f"apply(): this model was prepared by apply() already; {bare} (a second apply() "
                               "would stack its knobs: prune twice, wrap twice)")
    wrapped = _wrapper(model)
    if wrapped:
        raise UnsupportedError(f"apply(): the model is already wrapped ({wrapped}); {bare}")
    pruned = any(name.endswith("_mask") and hasattr(m, f"{name[:-5]}_orig")  # torch.nn.utils.prune's pair
                 for m in model.modules() for name, _ in m.named_buffers(recurse=False))
    if config.pruning != "none" and pruned:
        raise UnsupportedError(f"apply(): the model already carries pruning masks and the configuration prunes "
                               f"({config.pruning}); {bare}")
    cast = next((p.dtype for p in model.parameters() if p.is_floating_point() and p.dtype != torch.float32), None)
    if config.precision in ("bf16", "fp16") and cast is not None:
        raise UnsupportedError(f"apply(): precision {config.precision} autocasts over fp32 weights, and this "
                               f"model's weights are {dtype_name(cast)} (as model() builds them, "
                               "or cast since): build them in float32 for autocast")
    built, now = measured_weights_dtype(config), weights_dtype(model)
    if built is not None and now is not None and now != built:
        raise UnsupportedError(f"apply(): the configuration was measured on model() as it builds its weights, in "
                               f"{built}, and this model's weights are {now} (cast after model() built it?); {bare}")


def _wrapper(model: Any) -> str:
    """The wrapper ``model`` already is ('DistributedDataParallel', 'torch.compile', ...), or ''."""
    import torch

    if isinstance(model, (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)):
        return type(model).__name__
    if hasattr(model, "_orig_mod"):  # torch.compile's OptimizedModule
        return "torch.compile"
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:
        return ""
    return "fully_shard (FSDP2)" if isinstance(model, FSDPModule) else ""


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

