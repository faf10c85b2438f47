"""A Lightning file's metric when it has no ``METRIC`` line: read from what its validation logs.

The LightningModule classes the file defines are read (their source, not run) for the
names their validation hooks log (``self.log("val_acc", ...)``, ``self.log_dict({...})``).
The metric is, in this order:

1. the value a ``monitor="..."`` in the file names (a ``ModelCheckpoint``, ``EarlyStopping``
   or a scheduler's monitor), when it is one of the logged names and the only one monitored;
2. the one value validation logs;
3. the one quality score among them when the others are losses (``val_loss`` and
   ``val_acc``: ``val_acc``).

Its direction is the monitor's ``mode="min"/"max"`` where given, else what its name says
(``loss``, ``perplexity``, ``mse``... lower is better; ``acc``, ``f1``, ``auc``... higher).
Anything else is ambiguous: the file is refused with the names found and the ``METRIC``
line that settles it. What was inferred, and why, is said before the study.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from advisor.core.errors import WorkloadError

HOOKS = ("validation_step", "on_validation_epoch_end", "on_validation_batch_end", "validation_epoch_end")
LOWER = ("loss", "perplexity", "ppl", "nll", "mse", "rmse", "mae", "mape", "error", "err", "wer", "cer",
         "bpc", "bpb", "entropy", "distance", "fid")
HIGHER = ("acc", "accuracy", "f1", "auc", "auroc", "ap", "map", "precision", "recall", "iou", "miou", "dice",
          "bleu", "rouge", "r2", "psnr", "ssim", "top1", "top5", "score", "mcc", "kappa")
FRACTION = ("acc", "accuracy", "f1", "auc", "auroc", "ap", "map", "precision", "recall", "iou", "miou", "dice",
            "top1", "top5", "mcc")


@dataclass(frozen=True)
class Inferred:
    """What the file's METRIC would have said, and how it was found (for the note)."""

    described: dict[str, Any]
    how: str


def direction(name: str) -> bool | None:
    """True: higher is better, False: lower is better, None: the name does not say."""
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]
    if any(w in LOWER for w in words):
        return False
    if any(w in HIGHER for w in words):
        return True
    return None


def _is_fraction(name: str) -> bool:
    return any(w in FRACTION for w in re.split(r"[^a-z0-9]+", name.lower()))


def _file_tree(module: ModuleType) -> ast.AST | None:
    """The file's syntax tree (read from its path: a model.py loaded by path is not in
    ``sys.modules``, where ``inspect`` looks)."""
    try:
        with open(module.__file__ or "", encoding="utf-8") as fh:
            return ast.parse(fh.read())
    except (OSError, SyntaxError, ValueError):
        return None


def _class_tree(module: ModuleType, tree: ast.AST | None, cls: type) -> ast.AST | None:
    if cls.__module__ == module.__name__ and tree is not None:  # defined in the file
        return next((n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls.__name__), None)
    try:  # imported from another module
        return ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return None


def logged_names(module: ModuleType, file_tree: ast.AST | None, classes: list[type]) -> tuple[list[str], bool]:
    """The names the validation hooks of ``classes`` log, in order, and whether some name
    could not be read (an f-string, a variable, a dict built elsewhere)."""
    names: list[str] = []
    unreadable = False
    for cls in classes:
        tree = _class_tree(module, file_tree, cls)
        if tree is None:
            unreadable = True
            continue
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or fn.name not in HOOKS:
                continue
            for call in ast.walk(fn):
                if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
                    continue
                found, ok = _names_of(call)
                unreadable |= not ok
                names += [n for n in found if n not in names]
    return names, unreadable


def _names_of(call: ast.Call) -> tuple[list[str], bool]:
    """(names, all readable) of one ``self.log(...)`` / ``self.log_dict(...)`` call; ([], True) otherwise."""
    if call.func.attr == "log":  # type: ignore[attr-defined]
        arg = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "name"), None)
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            return [arg.value], True
        return [], arg is None
    if call.func.attr == "log_dict":  # type: ignore[attr-defined]
        arg = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "dictionary"), None)
        if isinstance(arg, ast.Dict) and all(isinstance(k, ast.Constant) and isinstance(k.value, str)
                                             for k in arg.keys):
            return [k.value for k in arg.keys], True  # type: ignore[union-attr]
        return [], False
    return [], True


def monitors(tree: ast.AST | None) -> dict[str, str | None]:
    """``monitor="name"`` keywords anywhere in the file, each with its call's ``mode`` (or None)."""
    if tree is None:
        return {}
    found: dict[str, str | None] = {}
    for call in ast.walk(tree):
        if not isinstance(call, ast.Call):
            continue
        words = {k.arg: k.value for k in call.keywords}
        monitor = words.get("monitor")
        if isinstance(monitor, ast.Constant) and isinstance(monitor.value, str):
            mode = words.get("mode")
            found[monitor.value] = mode.value if isinstance(mode, ast.Constant) and mode.value in ("min", "max") \
                else found.get(monitor.value)
    for node in ast.walk(tree):  # a scheduler's {"monitor": "val_loss"} in configure_optimizers
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values, strict=True):
                if (isinstance(k, ast.Constant) and k.value == "monitor" and isinstance(v, ast.Constant)
                        and isinstance(v.value, str)):
                    found.setdefault(v.value, None)
    return found


def infer_metric(module: ModuleType, classes: list[type], where: str) -> Inferred:
    """The metric of a Lightning file with no METRIC, or WorkloadError saying what to add."""
    tree = _file_tree(module)  # read and parsed once
    names, unreadable = logged_names(module, tree, classes)
    fix = "add METRIC = {'name': <the logged name>, 'higher_is_better': True or False}"
    if not names:
        some = " (it logs names advisor cannot read without running it)" if unreadable else ""
        raise WorkloadError(f"{where}: validation_step logs no value advisor can compare{some}; {fix}")
    watched = {n: mode for n, mode in monitors(tree).items() if n in names}
    if len(watched) == 1:
        name, mode = next(iter(watched.items()))
        how = f"the value the file monitors (monitor={name!r})"
        higher = {"max": True, "min": False}.get(mode or "", direction(name))
    else:
        scores = [n for n in names if direction(n) is True]
        if len(names) == 1 and not unreadable:
            name, how = names[0], "the one value validation_step logs"
        elif len(scores) == 1 and all(direction(n) is False for n in names if n != scores[0]) and not unreadable:
            name = scores[0]
            others = ", ".join(repr(n) for n in names if n != name)
            how = f"the one score validation_step logs (besides {others})"
        else:
            listed = ", ".join(repr(n) for n in names) + (" and names it builds at run time" if unreadable else "")
            raise WorkloadError(f"{where}: validation_step logs {listed}: which is the study's metric is "
                                f"ambiguous; {fix}")
        higher = direction(name)
    if higher is None:
        raise WorkloadError(f"{where}: the metric is {name!r} ({how}), but its name does not say whether higher "
                            f"is better; add METRIC = {{'name': {name!r}, 'higher_is_better': True or False}}")
    described = {"name": name, "higher_is_better": higher, "fraction": higher and _is_fraction(name)}
    return Inferred(described, f"{how}, {'higher' if higher else 'lower'} is better; METRIC in the file "
                               "overrides it")
