"""Lightning files: a LightningModule and a LightningDataModule tuned as they are written.

A file given to ``advisor tune`` is a Lightning file when it defines no ``datasets()`` but
a ``LightningDataModule`` (a class defined in the file, or ``datamodule()`` returning one)
and a ``LightningModule`` (a class defined in the file, or ``model()`` returning one);
classes are built with no arguments. ``METRIC`` names the value ``validation_step`` logs
that the study compares; without it, the metric is read from what validation logs
(``advisor.workload.lightning_metric``). This module turns such a file into the ``Workload`` the trial
loop runs (advisor.workload.contract):

- the data: ``prepare_data()``, ``setup("fit")``, then the datasets and collate function
  of ``train_dataloader()`` / ``val_dataloader()``; their batch size is the baseline's
  unless ``BASELINE`` says otherwise (the ``batch_size`` knob sets it in trials);
- the step: ``training_step`` gives the loss, ``configure_optimizers`` the optimizer and
  its schedulers (parsed by Lightning's own parser, stepped as Lightning steps them: every
  ``frequency`` optimizer steps or epochs, ReduceLROnPlateau on its monitor when
  training logs it), ``validation_step`` the metric (``advisor.workload.lightning_step``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from advisor.core.errors import WorkloadError
from advisor.core.metric import MetricSpec
from advisor.workload.lightning_metric import infer_metric
from advisor.workload.lightning_run import LightningRun


def lightning_bases() -> tuple[tuple[type, ...], tuple[type, ...]]:
    """(LightningModule classes, LightningDataModule classes) of the Lightning packages
    imported so far (``lightning.pytorch`` and / or ``pytorch_lightning``)."""
    modules, data = [], []
    for name in ("lightning.pytorch", "pytorch_lightning"):
        package = sys.modules.get(name)
        if package is not None:
            modules.append(package.LightningModule)
            data.append(package.LightningDataModule)
    return tuple(modules), tuple(data)


def is_lightning_file(module: ModuleType) -> bool:
    if callable(getattr(module, "datasets", None)):
        return False
    _, data_bases = lightning_bases()
    return bool(data_bases) and (callable(getattr(module, "datamodule", None))
                                 or bool(_defined(module, data_bases)))


def _defined(module: ModuleType, bases: tuple[type, ...]) -> list[type]:
    """Classes defined in ``module`` deriving from ``bases``, less those another one derives from."""
    found = [v for v in vars(module).values()
             if isinstance(v, type) and issubclass(v, bases) and v.__module__ == module.__name__]
    return [c for c in found if not any(o is not c and issubclass(o, c) for o in found)]


def _factory(module: ModuleType, function: str, bases: tuple[type, ...], kind: str, path: str) -> tuple[Callable, str]:
    if callable(getattr(module, function, None)):
        return getattr(module, function), f"{function}()"
    classes = _defined(module, bases)
    if len(classes) != 1:
        found = ", ".join(c.__name__ for c in classes) or "none"
        raise WorkloadError(f"{path}: a Lightning file needs exactly one {kind} class, or {function}() returning "
                            f"the one to tune; found {found}")
    return classes[0], f"{classes[0].__name__}()"


def lightning_pieces(path: Any, module: ModuleType, baseline: dict[str, Any], problems: list[str]) -> dict[str, Any]:
    """A Lightning file's part of its Workload (see the module's docstring); ``problems``
    found so far (a bad BASELINE) are reported with this file's own."""
    where = str(path)
    for name in ("loss", "metric", "optimizer"):
        if callable(getattr(module, name, None)):
            problems.append(f"{name}() is not used in a Lightning file (training_step gives the loss, "
                            "validation_step logs the metric, configure_optimizers gives the optimizer): remove it")
    if hasattr(module, "LOSS"):
        problems.append("LOSS is not used in a Lightning file (training_step gives the loss): remove it")
    module_bases, data_bases = lightning_bases()
    described, inferred = getattr(module, "METRIC", None), None
    if described is None and not problems:  # what validation_step logs, read from the file (lightning_metric)
        classes = [v for v in vars(module).values()
                   if isinstance(v, type) and issubclass(v, module_bases) and v not in module_bases]
        inferred = infer_metric(module, classes, where)
        described = inferred.described
    elif not isinstance(described, dict) or not described.get("name"):
        problems.append("METRIC names the value validation_step logs that the study compares, and which way is "
                        "better: METRIC = {'name': 'val_acc', 'higher_is_better': True}")
    if problems:
        raise WorkloadError(f"{where}: " + "; ".join(problems))
    spec = MetricSpec.from_contract(described, True, where)
    make_module, module_name = _factory(module, "model", module_bases, "LightningModule", where)
    make_data, data_name = _factory(module, "datamodule", data_bases, "LightningDataModule", where)
    run = LightningRun(where, baseline, {"make_module": make_module, "module_name": module_name, "make_data": make_data,
                                         "data_name": data_name, "module_bases": module_bases,
                                         "data_bases": data_bases})
    run.metric_name = spec.name
    run.metric_how = inferred.how if inferred is not None else ""
    return {"model": run.model, "datasets": run.datasets, "loss": run.loss, "metric": run.metric,
            "optimizer": run.optimizer, "baseline": baseline, "metric_spec": spec, "kind": "lightning",
            "names": run.names(), "collate": run.collate,
            "validate": lambda predict, batches: run.validate(predict, batches, spec.name),
            "start_trial": run.start_trial, "epoch_end": run.epoch_end, "notes": run.notes}
