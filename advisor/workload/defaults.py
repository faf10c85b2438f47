"""The contract's defaults: the loss, metric and optimizer a model.py that names none gets,
and how they read a model's output.

A model's output is either its class scores or an object holding them as ``logits``
(transformers' ModelOutput, a dict with "logits"). Scores come per sample (batch,
classes), per position with the classes last (batch, positions, classes: a language
model, targets (batch, positions)) or with the classes second (batch, classes, height,
width: segmentation). Targets of -100 count in neither loss nor metric, as in PyTorch
and transformers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from advisor.core.errors import WorkloadError


def scores_of(output: Any) -> Any:
    """The class scores in a model's output: the output itself, or its ``logits``
    (transformers' ModelOutput, a dict with "logits", any object with a ``logits``)."""
    if isinstance(output, Mapping):
        return output["logits"] if "logits" in output else output
    logits = getattr(output, "logits", None)
    return output if logits is None else logits


def flat_scores(output: Any, target: Any) -> tuple[Any, Any]:
    """Scores as (N, classes) and targets as (N,): a score vector per sample (batch,
    classes), per position with the classes last (batch, positions, classes: language
    models), or with the classes second (batch, classes, height, width: segmentation)."""
    scores = scores_of(output)
    _check_scores(scores, target)
    if scores.dim() <= 2 or target.dim() == 0:
        return scores, target
    if tuple(scores.shape[:-1]) == tuple(target.shape):
        return scores.reshape(-1, scores.shape[-1]), target.reshape(-1)
    return scores.movedim(1, -1).reshape(-1, scores.shape[1]), target.reshape(-1)


def _check_scores(scores: Any, target: Any) -> None:
    """What the default loss and metric can read, or a TypeError saying what they found."""
    import torch

    own = "define loss(output, target) and metric(output, target) in model.py for this model"
    if not isinstance(scores, torch.Tensor):
        what = (f"a {type(scores).__name__} of {len(scores)}" if isinstance(scores, (tuple, list, Mapping))
                else f"a {type(scores).__name__}")
        keys = f" (keys {', '.join(map(repr, list(scores)[:5]))}, no 'logits')" if isinstance(scores, Mapping) else ""
        raise TypeError(f"the model's output is {what}{keys}, not class scores: the default loss and metric read "
                        f"a tensor (batch, classes), or an output holding it as `logits`; {own}")
    if isinstance(target, torch.Tensor) and target.is_floating_point() and (
            scores.dim() < 2 or target.shape != scores.shape):  # same shape, 2-D or more: class probabilities
        raise TypeError(f"the targets are {str(target.dtype).removeprefix('torch.')} values of shape "
                        f"{tuple(target.shape)}, not class indices: the default loss (cross entropy) and metric "
                        f"(accuracy) are for classification; for a regression, {own} (and METRIC, its direction)")
    if scores.dim() < 2:
        raise TypeError(f"the model's output has shape {tuple(scores.shape)}, not (batch, classes): the default "
                        f"loss and metric read a score per class; {own}")


def batch_len(x: Any, y: Any) -> int:
    """How many samples a batch holds: the leading size of its target (the first tensor
    in a dict or tuple of targets), else of its input; what a batch's metric is weighted
    by (``len`` of a dict target would count its keys)."""
    for part in (y, x):
        while isinstance(part, (Mapping, list, tuple)) and len(part):
            part = next(iter(part.values())) if isinstance(part, Mapping) else part[0]
        shape = getattr(part, "shape", None)
        if shape is not None and len(shape):
            return int(shape[0])
    return len(y)


IGNORE_INDEX = -100  # targets equal to it count in neither loss nor metric (PyTorch's and transformers' default)


def default_loss(output: Any, target: Any) -> Any:
    """Cross entropy over the output's scores (see ``flat_scores``), the default ``loss``."""
    import torch.nn.functional as F

    scores, target = flat_scores(output, target)
    return F.cross_entropy(scores, target, ignore_index=IGNORE_INDEX)


def default_metric(output: Any, target: Any) -> float:
    """Top-1 accuracy over the output's scores, targets of -100 left out: the default ``metric``."""
    scores, target = flat_scores(output, target)
    counted = target != IGNORE_INDEX
    if not bool(counted.any()):
        return 0.0
    return (scores.argmax(dim=-1)[counted] == target[counted]).float().mean().item()


OUTPUT_LOSS = "output.loss"


def output_loss(output: Any, target: Any, where: str = "model.py") -> Any:
    """The loss the model computed itself (``LOSS = "output.loss"`` in model.py): the
    output's ``loss`` (a transformers model given ``labels`` in its input dict)."""
    value = output.get("loss") if isinstance(output, Mapping) else getattr(output, "loss", None)
    if value is None:
        raise WorkloadError(f'{where}: LOSS = "{OUTPUT_LOSS}", but the model returned {type(output).__name__} without a '
                            "loss (give the model its labels in the input dict, e.g. {'input_ids': ..., 'labels': ...})")
    return value


def default_optimizer(parameters: Any) -> Any:
    """AdamW with lr=1e-3, the default ``optimizer`` of the contract."""
    import torch

    return torch.optim.AdamW(parameters, lr=1e-3)


