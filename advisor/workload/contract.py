"""Load a user's model.py and hold it to the model.py contract (see README).

The contract::

    def model() -> torch.nn.Module             # required
    def datasets() -> tuple[Dataset, Dataset]  # required: (train, validation); train may be a stream
    def loss(output, target) -> Tensor         # optional; default cross entropy
    def metric(output, target) -> float        # optional; default top-1 accuracy
    def optimizer(parameters) -> Optimizer     # optional; default AdamW(lr=1e-3)
    def tp_plan() -> dict[str, str]            # optional; tensor parallelism's plan: layer name -> style
    def pipeline_split() -> list[str]          # optional; the layers where a pipeline stage may begin
    BASELINE = {"batch_size": 64}              # optional; the user's current setup
    LOSS = "output.loss"                       # optional, instead of loss(): the model returns its own
    METRIC = {"name": ..., "higher_is_better": ...}  # optional; what metric() is (advisor.core.metric)

The defaults, and how they read a model's output, are in ``advisor.workload.defaults``.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
import numbers
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from advisor.core.errors import FrozenModelError, WorkloadError
from advisor.core.metric import MetricSpec
from advisor.workload.defaults import OUTPUT_LOSS, default_loss, default_metric, default_optimizer, output_loss
from advisor.workload.stream import check_stream, first_items, is_stream
from advisor.workload.user_code import import_limit, time_limit, user_code

_REQUIRED = ("model", "datasets")
_OPTIONAL = ("loss", "metric", "optimizer", "tp_plan", "pipeline_split", "collate")
_counter = itertools.count()


@dataclass
class Workload:
    """A loaded model.py: its functions (defaults filled in) and identity."""

    path: Path
    source: str
    sha256: str
    module: ModuleType
    model: Callable[[], Any]
    datasets: Callable[[], Any]
    loss: Callable[[Any, Any], Any]
    metric: Callable[[Any, Any], float]
    optimizer: Callable[[Any], Any]
    baseline: dict[str, Any] = field(default_factory=dict)
    metric_spec: MetricSpec = field(default_factory=MetricSpec)
    # A Lightning file (advisor.workload.lightning) fills these; a model.py leaves them None.
    kind: str = "model.py"  # or "lightning"
    names: dict[str, str] = field(default_factory=dict)  # contract role -> what the file calls it
    collate: Callable[[list[Any]], Any] | None = None  # items -> (input, target), else default collate
    validate: Callable[[Callable[[Any], Any], Any], float] | None = None  # (predict, batches) -> the metric
    start_trial: Callable[..., None] | None = None  # after the knobs: batch_size, accumulation, rank, ...
    epoch_end: Callable[[int], None] | None = None  # after each training epoch
    notes: Callable[[Any], list[str]] | None = None  # (the built model) -> what the preflight says of it
    # model.py's own word on splitting its model (advisor.workload.splits checks them)
    tp_plan: Callable[[], Any] | None = None
    pipeline_split: Callable[[], Any] | None = None

    @property
    def name(self) -> str:
        return self.path.stem

    def where(self, func: str) -> str:
        return f"{self.path}: {self.names.get(func, func + '()')}"


def file_sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def load_workload(path: str | Path, source: str | None = None) -> Workload:
    """Import model.py from ``path`` and check the shape of the contract.

    ``source`` (the file's text) lets a worker on another node run the same code when
    the file is not on its disk. Raises WorkloadError naming the file and the problem.
    """
    path = Path(path).expanduser().resolve()
    if source is None:
        if not path.exists():
            raise WorkloadError(f"{path}: no such file (expected a model.py with model() and datasets())")
        if not path.is_file():
            raise WorkloadError(f"{path}: is a directory, expected a Python file")
        try:
            source = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise WorkloadError(f"{path}: cannot be read as Python source text ({exc})") from None
    try:
        code = compile(source, str(path), "exec")
    except SyntaxError as exc:
        line = (exc.text or "").rstrip("\n")
        caret = (f"\n    {line.strip()}\n    {' ' * max(0, (exc.offset or 1) - 1 - (len(line) - len(line.lstrip())))}^"
                 if line.strip() else "")
        raise WorkloadError(
            f"{path}:{exc.lineno}: not valid Python: {exc.msg} (expected a model.py with model() and datasets())"
            + caret) from None
    module = ModuleType(f"_advisor_workload_{path.stem}_{next(_counter)}")
    module.__file__ = str(path)
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    limit = import_limit()
    # importable by its name, as an imported module is: torch.compile imports the module of
    # each function it inlines to read its globals (a Block's forward calling F.relu, inside
    # an nn.Sequential, failed with "No module named '_advisor_workload_conv_net_0'")
    sys.modules[module.__name__] = module
    try:
        with user_code(f"{path}: importing it", importing=True), time_limit(limit, f"{path}: importing it"):
            exec(code, module.__dict__)
    except BaseException:
        sys.modules.pop(module.__name__, None)
        raise
    return _bind(path, source, module)


def _bind(path: Path, source: str, module: ModuleType) -> Workload:
    from advisor.workload.lightning import is_lightning_file, lightning_pieces

    problems: list[str] = []
    if is_lightning_file(module):  # a LightningModule and a LightningDataModule, no glue
        baseline = _baseline(module, path, problems)
        return Workload(path=path, source=source, sha256=file_sha256(source), module=module,
                        **lightning_pieces(path, module, baseline, problems))
    for name in _REQUIRED:
        if not callable(getattr(module, name, None)):
            problems.append(f"{name}() is missing (required by the model.py contract){_near(module, name)}")
    for name in _OPTIONAL:
        if hasattr(module, name) and not callable(getattr(module, name)):
            problems.append(f"{name} must be a function, found {type(getattr(module, name)).__name__}")
    declared_loss = getattr(module, "LOSS", None)
    if declared_loss is not None and declared_loss != OUTPUT_LOSS:
        problems.append(f'LOSS must be "{OUTPUT_LOSS}" (the model returns its own loss), found {declared_loss!r}')
    elif declared_loss is not None and hasattr(module, "loss"):
        problems.append(f'both loss() and LOSS = "{OUTPUT_LOSS}" are defined: keep one')
    baseline = _baseline(module, path, problems)
    if problems:
        raise WorkloadError(f"{path}: " + "; ".join(problems))
    spec = MetricSpec.from_contract(getattr(module, "METRIC", None), hasattr(module, "metric"), str(path))
    return Workload(
        path=path,
        source=source,
        sha256=file_sha256(source),
        module=module,
        model=module.model,
        datasets=module.datasets,
        loss=(functools.partial(output_loss, where=str(path)) if declared_loss == OUTPUT_LOSS
              else getattr(module, "loss", default_loss)),
        metric=getattr(module, "metric", default_metric),
        optimizer=getattr(module, "optimizer", default_optimizer),
        baseline=dict(baseline),
        metric_spec=spec,
        tp_plan=getattr(module, "tp_plan", None),
        pipeline_split=getattr(module, "pipeline_split", None),
        collate=getattr(module, "collate", None),  # items -> (input, target): padding variable-length items
        names={**({} if declared_loss is not None or hasattr(module, "loss")
                  else {"loss": "the default loss (cross entropy: model.py defines no loss())"}),
               **({} if hasattr(module, "metric") else {"metric": "the default metric (accuracy: model.py defines no "
                                                                 "metric())"})},
    )


def _near(module: ModuleType, name: str) -> str:
    """' (did you mean to call dataset() datasets()?)' for a function of model.py's own whose
    name is close to a contract name, else ''."""
    import difflib
    import inspect

    own = [n for n, v in vars(module).items() if inspect.isfunction(v) and v.__module__ == module.__name__
           and n not in (*_REQUIRED, *_OPTIONAL)]
    close = difflib.get_close_matches(name, own, n=1, cutoff=0.75)
    return f" (model.py defines {close[0]}(): did you mean to name it {name}()?)" if close else ""


def _baseline(module: ModuleType, path: Path, problems: list[str]) -> dict[str, Any]:
    baseline = getattr(module, "BASELINE", {})
    if not isinstance(baseline, dict):
        problems.append(f"BASELINE must be a dict such as {{'batch_size': 64}}, found {type(baseline).__name__}")
        return {}
    return dict(baseline)


def call(workload: Workload, func: str, *args: Any) -> Any:
    """Call a contract function; whatever it raises becomes a WorkloadError naming it."""
    with user_code(workload.where(func)):
        return getattr(workload, func)(*args)


def build_model(workload: Workload, trained: bool = True) -> Any:
    """model()'s module, checked; ``trained``: it is to be trained, so it needs a parameter
    that takes gradients (a model frozen for serving is built for an inference study)."""
    import torch

    model = call(workload, "model")
    if isinstance(model, type) and issubclass(model, torch.nn.Module):
        raise WorkloadError(f"{workload.where('model')} must return a torch.nn.Module, found the class "
                            f"{model.__name__} itself: return {model.__name__}(...), an instance")
    if not isinstance(model, torch.nn.Module):
        raise WorkloadError(f"{workload.where('model')} must return a torch.nn.Module, found {type(model).__name__}")
    if trained and not any(p.requires_grad for p in model.parameters()):
        raise FrozenModelError(
            f"{workload.where('model')} returned a module with no trainable parameters (requires_grad is False "
            "for every one); expected a model to train: advisor runs one training step to check "
            "model.py and trials train it; a model frozen for serving is measured with --workload inference")
    return model


def load_datasets(workload: Workload) -> tuple[Any, Any]:
    """Call datasets() and check it returns two non-empty datasets: a map-style validation
    set, and a map-style training set or a stream (``advisor.workload.stream``)."""
    pair = call(workload, "datasets")
    where = workload.where("datasets")
    if not isinstance(pair, (tuple, list)) or len(pair) != 2:
        raise WorkloadError(f"{where} must return (train, validation), found {_describe(pair)}")
    for role, data in zip(("train", "validation"), pair):
        _refuse_loader(workload, where, role, data)
        if is_stream(data):
            _check_stream(workload, where, role, data)
            continue
        if not hasattr(data, "__getitem__") or not hasattr(data, "__len__"):
            raise WorkloadError(
                f"{where}: the {role} dataset must be a map-style Dataset (with __len__ and __getitem__)"
                + (" or a stream (an IterableDataset)" if role == "train" else "") + f", found {type(data).__name__}"
            )
        if len(data) == 0:
            raise WorkloadError(f"{where}: the {role} dataset is empty")
        if workload.collate is None:  # else items are whatever the workload's collate takes
            items = []
            for index in range(min(2, len(data))):
                with user_code(f"{where}: {role}[{index}]"):
                    items.append(data[index])
            _check_items(where, role, items, f"{role}[{{}}]")
    return pair[0], pair[1]


def _refuse_loader(workload: Workload, where: str, role: str, data: Any) -> None:
    """A DataLoader is not a dataset here: its items are whole batches, so a trial would batch
    batches (samples/s counting batches, the metric on other data than meant), and the batch
    size, workers and sampler are what advisor tries. A review found such a study finishing
    with exit status 0 and meaningless figures."""
    import torch

    if not isinstance(data, torch.utils.data.DataLoader):
        return
    inner = data.dataset
    custom = (data.collate_fn not in (torch.utils.data.default_collate, torch.utils.data.default_convert)
              and workload.collate is None)
    raise WorkloadError(
        f"{where}: the {role} set is a DataLoader (batches of {data.batch_size}); expected the dataset it reads, "
        f"whose items are single (input, target) samples: return loader.dataset (here "
        f"{type(inner).__name__}) instead. advisor builds the loader itself, for each batch size, worker count and "
        "sampler it tries (BASELINE's batch_size says yours)"
        + ("; the loader's collate_fn goes in model.py as collate(items)" if custom else ""))


def _check_stream(workload: Workload, where: str, role: str, data: Any) -> None:
    """A training stream: one that can be started again, whose first pass gives items."""
    kind = type(data).__name__
    if role == "validation":
        raise WorkloadError(
            f"{where}: the validation set must be map-style (with __len__ and __getitem__), found a stream ({kind}): "
            "every evaluation reads all of it, the same items for every trial. A training set may be a stream; "
            "keep the validation items instead (list(stream) is a map-style set of them)")
    check_stream(data, where, "training")
    items = first_items(data, 2, f"{where}: the training stream ({kind}), started with iter(),")
    if not items:
        raise WorkloadError(f"{where}: the training set is a stream ({kind}) that yielded nothing: its first pass "
                            "(iter()) ended before one item; expected (input, target) items")
    if workload.collate is None:
        _check_items(where, role, items, "the training stream's item {}")


def _check_items(where: str, role: str, items: list[Any], name: str) -> None:
    shapes = []
    for index, item in enumerate(items):
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise WorkloadError(f"{where}: {name.format(index)} must be an (input, target) pair, "
                                f"found {_describe(item)}")
        shapes.append(_shape(item))
    if len(shapes) == 2 and shapes[0] != shapes[1]:
        raise WorkloadError(
            f"{where}: {role} items have inconsistent shapes: item 0 is {shapes[0]}, item 1 is {shapes[1]} "
            "(every item must have the same shapes so batches can be collated; for items of different lengths, "
            "define collate(items) -> (input, target) in model.py, which pads them)"
        )


def _shape(obj: Any) -> Any:
    if hasattr(obj, "shape"):
        return (type(obj).__name__, tuple(obj.shape))
    if isinstance(obj, dict):
        return {k: _shape(v) for k, v in sorted(obj.items())}
    if isinstance(obj, (tuple, list)):
        return tuple(_shape(v) for v in obj)
    return type(obj).__name__


def _describe(obj: Any) -> str:
    if isinstance(obj, (tuple, list)):
        return f"a {type(obj).__name__} of {len(obj)}"
    return type(obj).__name__


def forward(model: Any, inputs: Any) -> Any:
    """Call the model the way the contract says: tensor, tuple (*x) or dict (**x)."""
    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, (tuple, list)):
        return model(*inputs)
    return model(inputs)


def check_loss(workload: Workload, value: Any) -> None:
    import torch

    where = workload.where("loss")
    if not isinstance(value, torch.Tensor) or value.numel() != 1:
        found = f"a tensor of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__
        raise WorkloadError(f"{where} must return a scalar tensor, found {found}")
    if not value.requires_grad:
        raise WorkloadError(f"{where} returned a tensor that does not require grad; backward() cannot train the model")
    if not bool(torch.isfinite(value.detach()).all()):
        raise WorkloadError(f"{where} returned {value.item()} on a batch of 2 training samples in fp32, before any "
                            "training step: expected a finite number (every trial would diverge at its first step)")


def check_metric(workload: Workload, value: Any) -> float:
    import torch

    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, int, float)) and getattr(value, "shape", ()) == ():
        value = float(value)  # a numpy (or other) real scalar: np.float32, np.int64
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        shape = getattr(value, "shape", None)
        shown = f" of shape {tuple(shape)} (one number per batch is expected)" if shape else ""
        raise WorkloadError(f"{workload.where('metric')} must return a number, found {type(value).__name__}{shown}")
    if not math.isfinite(value):
        raise WorkloadError(f"{workload.where('metric')} returned {value}, expected a finite number")
    return float(value)
