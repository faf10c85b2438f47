"""transformers' ``Conv1D`` layers (GPT-2 and its kin) as ``nn.Linear``, for the techniques
that act on nn.Linear only.

A Conv1D is a Linear whose weight is stored transposed, (in_features, out_features), its
forward ``addmm(bias, x, weight)``. torchao (``quantize_``, QAT, fp8 training) and the 2:4
sparse kernels take nn.Linear only, so on GPT-2 they would find nothing but the output
layer. Before any technique runs, ``advisor.apply`` replaces each Conv1D by an nn.Linear
computing the same thing (``conv1d_to_linear``) when the configuration has one of those
(``needs_linear``): the weight transposed (a contiguous copy), the same bias, device,
dtype and requires_grad. Pruning by masks (l1, ln) acts on Conv1D directly and swaps
nothing.

Afterwards ``state_dict`` keys keep their names, but those layers' weights are (out, in):
``conv1d_layout`` turns such a state dict back into the Conv1D layout, to load into the
unswapped model (``Prepared.conv1d_swapped`` names the layers).
"""

from __future__ import annotations

from typing import Any

from advisor.core.config import TrialConfig
from advisor.techniques._base import plain_tensor
from advisor.workload.structure import is_conv1d, tied_parameters


def swap_snippet(why: str) -> str:
    """The lines that swap a model's Conv1D layers, for a technique's plain-PyTorch snippet."""
    return ("from advisor.techniques.conv1d import conv1d_to_linear\n"
            f"conv1d_to_linear(model)  # transformers Conv1D (GPT-2) -> equal nn.Linear, {why}; no-op without them")


def needs_linear(config: TrialConfig) -> bool:
    """Whether ``config`` has a technique that acts on nn.Linear only: any quantization
    (torchao), or 2:4 sparsity (its kernels)."""
    return config.quantization != "none" or config.pruning == "semi_structured_2_4"


def conv1d_to_linear(module: Any) -> list[str]:
    """Replace every transformers Conv1D under ``module`` by an equal nn.Linear, in place;
    the names replaced. A pruned Conv1D (torch's ``weight_orig`` and ``weight_mask``) keeps
    its mask, transposed. One whose weight is tied to another layer's, or parametrized, is
    left as it is: a copy would untie it."""
    import torch
    import torch.nn.utils.prune as prune
    from torch import nn

    tied = tied_parameters(module)
    swaps: dict[int, Any] = {}
    names: list[str] = []
    for name, layer in module.named_modules():
        if not name or not is_conv1d(layer):
            continue
        mask = layer._buffers.get("weight_mask")
        w = layer._parameters.get("weight_orig" if mask is not None else "weight")
        b = layer._parameters.get("bias")
        # (isinstance, not type: a parameter on fake tensors, as the memory estimate builds it, is a FakeTensor)
        if not isinstance(w, nn.Parameter) or id(w) in tied or (b is not None and id(b) in tied):
            continue
        with torch.no_grad():
            linear = nn.Linear(w.shape[0], w.shape[1], bias=False, device="meta", dtype=w.dtype)
            linear.weight = nn.Parameter(w.detach().t().contiguous(), requires_grad=w.requires_grad)
        linear.bias = b  # the same parameter: a bias has no orientation
        if mask is not None:
            prune.custom_from_mask(linear, "weight", mask=mask.t().contiguous())
        linear.train(layer.training)
        swaps[id(layer)] = linear
        names.append(name)
    if swaps:  # every place a swapped layer sits (a module shared under two names stays shared)
        for parent in module.modules():
            for child_name, child in list(parent._modules.items()):
                if child is not None and id(child) in swaps:
                    parent._modules[child_name] = swaps[id(child)]
    return names


def conv1d_layout(state_dict: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """``state_dict`` with the weights of the layers ``names`` (swapped by
    ``conv1d_to_linear``) transposed back to Conv1D's (in, out), for loading into the
    unswapped model. A quantized or sparse weight has no such layout: ValueError."""
    out = dict(state_dict)
    for name in names:
        key = f"{name}.weight"
        if key not in out:
            continue
        if not plain_tensor(out[key]):
            raise ValueError(f"{key} is a {type(out[key]).__name__}, not a plain tensor: a quantized or sparse "
                             "weight cannot be transposed back into a Conv1D")
        out[key] = out[key].t().contiguous()
    return out
