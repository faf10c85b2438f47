"""Weight pruning: unstructured L1, structured (L2 over output channels), and 2:4
semi-structured sparsity (the pattern sparse tensor cores accelerate on CUDA sm80+).

Pruned weights stay zero through training (torch.nn.utils.prune masks) and are made
permanent when the trial finishes training (``Prepared.finish``); for an inference
workload at once. The last Linear/Conv layer (the output layer) is kept dense: pruning
it removes whole classes. transformers' Conv1D layers (GPT-2: weight stored (in, out))
are pruned as they are, structured pruning along their output channels (dim 1); for 2:4,
``advisor.apply`` has made them nn.Linear first (advisor/techniques/conv1d.py). Achieved
sparsity is recorded by the trial.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from advisor.core.errors import UnsupportedError
from advisor.techniques._base import Technique, plain_tensor
from advisor.techniques.conv1d import swap_snippet
from advisor.workload.structure import is_conv1d, prunable

if TYPE_CHECKING:
    from advisor.machine.hardware import Hardware
    from advisor.techniques.prepared import Prepared

AMPERE = (8, 0)


class Pruning(Technique):
    key = "pruning"
    description = "weight pruning of Linear/Conv layers (output layer kept dense); 2:4 needs CUDA sm80+"

    def unavailable(self, value: Any, hw: Hardware) -> str | None:
        if value != "semi_structured_2_4":
            return None
        if hw.device != "cuda":
            return "2:4 sparse kernels run on NVIDIA sparse tensor cores (compute capability >= 8.0); this machine has no CUDA GPU"
        cap = hw.min_capability()
        if cap is not None and cap < AMPERE:
            return f"2:4 sparsity needs compute capability >= 8.0; this machine has {hw.gpu_names()}"
        return None

    def pointless(self, value: Any, facts: dict[str, Any]) -> str | None:
        if value != "none" and facts.get("prunable_layers") == 0:
            left_out = facts.get("parametrized_layers") or []
            if left_out:
                return (f"its Linear/Conv layers {', '.join(left_out[:4])}{' ...' if len(left_out) > 4 else ''} "
                        "have parametrized weights (weight_norm, spectral_norm or another parametrization), which "
                        "torch's pruning cannot reparametrize, and the output layer is kept dense")
            return "the model has at most one Linear/Conv layer, and the output layer is kept dense"
        return None

    def apply(self, value: Any, prepared: Prepared) -> None:
        import torch.nn.utils.prune as prune

        if value == "none":
            return
        layers = prunable(prepared.module)
        if value == "semi_structured_2_4":
            layers = [(n, m) for n, m in layers  # (a Conv1D left unswapped, tied: its inputs are its rows)
                      if m.weight.dim() == 2 and m.weight.shape[1] % 4 == 0 and not is_conv1d(m)]
        if not layers:
            raise UnsupportedError(f"pruning {value}: no layer to prune (the output layer is kept dense"
                                   + (", and 2:4 needs Linear layers whose input size is a multiple of 4)" if value == "semi_structured_2_4" else ")"))
        amount = prepared.config.prune_amount
        for _, layer in layers:
            if value == "l1_unstructured":  # scores made contiguous: torch's prune flattens with
                # .view(-1), which fails on channels_last weights
                prune.l1_unstructured(layer, "weight", amount=amount, importance_scores=layer.weight.detach().contiguous())
            elif value == "ln_structured":  # output channels: a Conv1D's weight is (in, out)
                prune.ln_structured(layer, "weight", amount=amount, n=2, dim=1 if is_conv1d(layer) else 0)
            else:
                prune.custom_from_mask(layer, "weight", mask=mask_2_4(layer.weight))
        sparse_kernels = value == "semi_structured_2_4" and prepared.device.type == "cuda"
        if prepared.workload == "inference":  # no training: the zeros are final now
            make_permanent(prepared.module)
            if sparse_kernels:
                to_semi_structured(prepared)
            return
        prepared.step.finishers.insert(0, lambda: make_permanent(prepared.module))  # before quantization converts
        if sparse_kernels:
            prepared.step.finishers.insert(1, lambda: to_semi_structured(prepared))

    def snippet(self, value: Any) -> str | None:
        if value == "none":
            return None
        call = {"l1_unstructured": "prune.l1_unstructured(layer, 'weight', amount=AMOUNT)",
                "ln_structured": "prune.ln_structured(layer, 'weight', amount=AMOUNT, n=2, "
                                 "dim=1 if type(layer).__name__ == 'Conv1D' else 0)  # Conv1D: (in, out)",
                "semi_structured_2_4": "prune.custom_from_mask(layer, 'weight', mask=two_of_every_four(layer.weight))"}[value]
        swap = swap_snippet("2:4 kernels take nn.Linear only") + "\n" if value == "semi_structured_2_4" else ""
        return ("import torch.nn.utils.prune as prune\n" + swap +
                "layers = [m for m in model.modules()  # transformers' Conv1D (GPT-2) too\n"
                "          if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d)) or type(m).__name__ == 'Conv1D'][:-1]\n"
                f"for layer in layers: {call}\n"
                "# ... train ...\n"
                "for layer in layers: prune.remove(layer, 'weight')  # make the zeros permanent")


def mask_2_4(weight: Any) -> Any:
    """Keep the 2 largest-magnitude weights of every 4 consecutive inputs of each row."""
    import torch

    rows, cols = weight.shape
    groups = weight.detach().abs().reshape(rows, cols // 4, 4)
    keep = groups.topk(2, dim=-1).indices
    mask = torch.zeros_like(groups, dtype=torch.bool).scatter_(-1, keep, True)
    return mask.reshape(rows, cols)


def masks(module: Any) -> dict[str, Any]:
    """The current pruning masks by layer name (to carry them across a module swap)."""
    return {n: m.weight_mask.detach().clone() for n, m in module.named_modules() if hasattr(m, "weight_mask")}


def make_permanent(module: Any) -> None:
    """Fold every pruning mask into its weight (prune.remove) so the zeros stay as data."""
    import torch.nn.utils.prune as prune

    for layer in module.modules():
        if prune.is_pruned(layer) and hasattr(layer, "weight_orig"):
            prune.remove(layer, "weight")


def to_semi_structured(prepared: Prepared) -> None:
    """On CUDA, store 2:4-pruned fp16/bf16 Linear weights as semi-structured sparse tensors
    (torch.sparse.to_sparse_semi_structured) so matmuls use the sparse kernels. Weights in
    fp32, and shapes the kernel torch picks does not take (``semi_structured_shape_ok``),
    stay dense (masked): the count converted is recorded."""
    import torch

    converted = 0
    for _, layer in prunable(prepared.module):
        w = getattr(layer, "weight", None)
        if (isinstance(layer, torch.nn.Linear) and w is not None and w.dtype in (torch.float16, torch.bfloat16)
                and semi_structured_shape_ok(tuple(w.shape), w.dtype)):
            layer.weight = torch.nn.Parameter(torch.sparse.to_sparse_semi_structured(w.detach()), requires_grad=False)
            converted += 1
    prepared.stats["semi_structured_layers"] = converted


def semi_structured_shape_ok(shape: tuple[int, ...], dtype: Any) -> bool:
    """Whether torch's 2:4 sparse kernel takes a weight of this shape and dtype: both sizes
    multiples of the backend's minimum (cuSPARSELt, torch's default: 16 x 16 for fp16 /
    bf16; CUTLASS when forced: 32 x 64), read from torch itself (its shape table is private:
    where it has moved, the most conservative rule, 64 x 64)."""
    try:
        from torch.sparse import (
            SparseSemiStructuredTensor,
            SparseSemiStructuredTensorCUSPARSELT,
            SparseSemiStructuredTensorCUTLASS,
        )

        backend = (SparseSemiStructuredTensorCUTLASS if SparseSemiStructuredTensor._FORCE_CUTLASS
                   else SparseSemiStructuredTensorCUSPARSELT)
        rule = backend._DTYPE_SHAPE_CONSTRAINTS[dtype]
        rows, cols = rule.sparse_min_rows, rule.sparse_min_cols
    except (ImportError, AttributeError, KeyError):
        rows = cols = 64
    return len(shape) == 2 and shape[0] >= rows and shape[0] % rows == 0 and shape[1] >= cols and shape[1] % cols == 0


def sparsity(module: Any) -> dict[str, Any]:
    """Zeros among the prunable layers' weights, and the model's (non-zero) parameter count.
    Sharded (FSDP) parameters are gathered, so every rank must call this together."""
    total = zeros = params = nonzero = 0
    for _, layer in prunable(module):
        w = _dense(getattr(layer, "weight", None))
        if w is not None:
            total += w.numel()
            zeros += int((w == 0).sum())
    seen: set[int] = set()
    for owner in module.modules():
        for name, p in owner.named_parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            if name.endswith("_orig") and hasattr(owner, name[: -len("_orig")] + "_mask"):
                p = getattr(owner, name[: -len("_orig")])  # pruned, not yet made permanent: the masked weight
            params += p.numel()
            dense = _dense(p)
            nonzero += int((dense != 0).sum()) if dense is not None else p.numel()
    return {"sparsity": zeros / total if total else None, "parameters": params, "nonzero_parameters": nonzero}


def _dense(t: Any) -> Any:
    """A plain tensor of ``t``'s values (FSDP's DTensors gathered), or None for quantized
    tensor subclasses whose zeros mean something else."""
    if t is None:
        return None
    if hasattr(t, "full_tensor"):
        t = t.full_tensor()
    return t.detach() if plain_tensor(t) else None


class PruneAmount(Technique):
    key = "prune_amount"
    read_by = "pruning"
    description = "fraction of weights (unstructured) or output channels (structured) pruned"

    def candidate_values(self, hw: Hardware) -> list[Any]:
        return [0.25, 0.5, 0.75]
