"""What the techniques see of a model's structure, decided in one place: the preflight
reports these counts (so a pointless option is dropped before the search) and the
techniques act on the same layers.
"""

from __future__ import annotations

from collections import Counter
from typing import Any


def dtype_name(dtype: Any) -> str:
    """A torch dtype as users write it: 'float32', not 'torch.float32'."""
    return str(dtype).removeprefix("torch.")


def weights_dtype(module: Any) -> str | None:
    """The dtype most of the model's floating parameters have, by count ("float32",
    "bfloat16"); None without any (or before a lazy module's first forward)."""
    counts: Counter[str] = Counter()
    for p in module.parameters():
        if p.is_floating_point() and type(p).__name__ != "UninitializedParameter":
            counts[dtype_name(p.dtype)] += p.numel()
    return counts.most_common(1)[0][0] if counts else None


def blocks(module: Any) -> list[Any]:
    """The model's blocks, each a unit for activation checkpointing and FSDP sharding: its
    repeated layers when it has them (a transformer's layers: the largest ModuleList or
    Sequential of two or more sub-blocks of one class), else its top-level children that
    hold parameters, looking inside ModuleList / ModuleDict containers (never called
    themselves: their elements are)."""
    repeated = _repeated_layers(module)
    return repeated if repeated else list(_parameterised_children(_unwrapped(module)))


def _unwrapped(module: Any) -> Any:
    """The module inside wrappers: while a module has no parameters of its own and one
    child holding them all (a LightningModule in its step, a model whose layers sit in one
    Sequential), that child."""
    while not any(True for _ in module.parameters(recurse=False)):
        holders = [c for c in module.children() if any(True for _ in c.parameters())]
        if len(holders) != 1:
            break
        module = holders[0]
    return module


def _parameterised_children(module: Any) -> Any:
    import torch.nn as nn

    for child in module.children():
        if isinstance(child, (nn.ModuleList, nn.ModuleDict)):
            yield from _parameterised_children(child)
        elif any(True for _ in child.parameters()):
            yield child


def _repeated_layers(module: Any) -> list[Any]:
    import torch.nn as nn

    best: list[Any] = []
    best_size = 0
    for container in module.modules():
        if not isinstance(container, (nn.ModuleList, nn.Sequential)):
            continue
        layers = list(container.children())
        if (len(layers) < 2 or len({type(layer) for layer in layers}) != 1
                or not any(True for _ in layers[0].children())):  # a run of plain layers is no block
            continue
        size = sum(p.numel() for p in container.parameters())
        if size > best_size:
            best, best_size = layers, size
    return best


def tied_parameters(module: Any) -> set[int]:
    """ids of the parameters reachable under more than one name (tied weights, such as a
    language model's input embedding and output layer)."""
    names = Counter(id(p) for _, p in module.named_parameters(remove_duplicate=False))
    return {pid for pid, n in names.items() if n > 1}


def is_conv1d(layer: Any) -> bool:
    """A transformers ``Conv1D`` (GPT-2 and its kin): a Linear whose weight is stored
    transposed, (in_features, out_features), its forward ``addmm(bias, x, weight)``; a
    subclass too (torch's pruning and parametrizations leave the class, or subclass it)."""
    return isinstance(getattr(layer, "nf", None), int) and any(
        c.__name__ == "Conv1D" and c.__module__.startswith("transformers") for c in type(layer).__mro__)


def linear_like(layer: Any) -> bool:
    """An nn.Linear, or a transformers Conv1D (a Linear stored transposed, which
    ``advisor.techniques.conv1d`` turns into one where a technique needs nn.Linear)."""
    import torch.nn as nn

    return isinstance(layer, nn.Linear) or is_conv1d(layer)


def _weighted_layer(layer: Any) -> bool:
    import torch.nn as nn

    return isinstance(layer, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)) or is_conv1d(layer)


def prunable(module: Any) -> list[tuple[str, Any]]:
    """(name, layer) of the Linear / Conv layers (transformers' Conv1D among them) that
    pruning touches: all but the last, the output layer, which is kept dense (pruning it
    removes whole classes), and none inside an nn.MultiheadAttention: it reads its output projection's weight directly,
    never calling that layer, so the mask's forward hook never runs there (training then
    fails: "backward through the graph a second time")."""
    import torch.nn as nn

    attention = [n + "." for n, m in module.named_modules() if isinstance(m, nn.MultiheadAttention)]
    layers = [(n, m) for n, m in module.named_modules()
              if _weighted_layer(m) and not any(n.startswith(prefix) for prefix in attention)]
    return [(n, m) for n, m in layers[:-1] if own_weight(m)]


def parametrized(module: Any) -> list[str]:
    """The Linear / Conv layers whose weight is computed, not a parameter of their own
    (``torch.nn.utils.parametrizations.weight_norm`` / ``spectral_norm``, the older
    ``weight_norm`` hook, any ``register_parametrization``): torch's pruning cannot
    reparametrize them, so ``prunable`` leaves them out."""
    return [n for n, m in module.named_modules() if _weighted_layer(m) and not own_weight(m)]


def own_weight(layer: Any) -> bool:
    """A weight of the layer's own, not computed by a parametrization: a parameter, or one
    torch's pruning already split into ``weight_orig`` and ``weight_mask`` (pruned by
    advisor, which prunes it again or makes it permanent). What torch's pruning and
    torchao's quantization and fp8 swaps can take."""
    params = layer._parameters
    return params.get("weight") is not None or (params.get("weight_orig") is not None
                                                 and "weight_mask" in layer._buffers)


def pipeline_units(module: Any, split: list[str] | None = None) -> list[str]:
    """The names where a unit of the model begins, for a pipeline to cut it into stages ("" for
    the first unit, which begins with the model): the names ``split`` lists (model.py's
    ``pipeline_split()``), else each of the model's blocks but the first (the part before the
    second block, embeddings included, is the first unit)."""
    if split is not None:
        return ["", *split]
    names = {id(m): n for n, m in module.named_modules()}
    found = [names[id(b)] for b in blocks(module) if id(b) in names]
    return ["", *found[1:]]
