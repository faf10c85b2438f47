"""The preflight: the model.py contract end to end on a two-sample batch, on CPU, in the
driver, before anything else starts; bad workloads are refused with the function named.
Its calls of model() and datasets() are the first: whatever they download is fetched here,
once, each call bounded in time (``advisor.workload.downloads``)."""

from __future__ import annotations

from typing import Any

from advisor.core.drain import captured_here, describe_tail
from advisor.core.errors import WorkloadError
from advisor.workload.contract import (
    Workload,
    build_model,
    call,
    check_loss,
    check_metric,
    forward,
    load_datasets,
)
from advisor.workload.downloads import PREFLIGHT_HINT
from advisor.workload.splits import split_facts, user_splits
from advisor.workload.stream import count_up_to, first_items, is_stream, shards_by_worker
from advisor.workload.structure import (
    blocks,
    dtype_name,
    is_conv1d,
    linear_like,
    own_weight,
    parametrized,
    prunable,
    weights_dtype,
)
from advisor.workload.user_code import preflight_limit, time_limit, user_code


def preflight(workload: Workload, kind: str = "train") -> dict[str, Any]:
    """Run the contract end to end on a two-sample batch, on CPU, in this process.

    Builds the model and datasets, collates two training samples, runs forward, loss,
    backward, an optimizer step and the metric. Returns facts about the workload
    (dataset sizes, parameter count). Raises WorkloadError on any violation, with the
    end of what model.py printed. What model.py prints meanwhile is not shown (a model.py
    printing megabytes per step would flood the console before the first trial).
    """
    with captured_here(None) as output:
        try:
            return _preflight(workload, kind)
        except WorkloadError as exc:
            failure = exc
    summary = output.summary()
    if summary["tail"]:
        raise WorkloadError(f"{failure}\n" + describe_tail(summary, who="model.py's output")) from None
    raise failure


def _preflight(workload: Workload, kind: str = "train") -> dict[str, Any]:
    import torch
    from torch.utils.data import default_collate

    limit = preflight_limit()  # model() and datasets() may download (once, here: trials run offline)
    # seeded as a trial is (before the model is built): the same file passes or fails the check on every run,
    # not by the draw of its initial weights (a metric dividing by a count of positive predictions did both)
    torch.manual_seed(0)
    with time_limit(limit, workload.where("model"), PREFLIGHT_HINT):
        model = build_model(workload, trained=kind == "train")
    splits = user_splits(workload, model)  # model.py's tp_plan() / pipeline_split(), checked
    facts = split_facts(workload, model, splits)
    with time_limit(limit, workload.where("datasets"), PREFLIGHT_HINT):
        train, val = load_datasets(workload)
    stream = is_stream(train)
    _check_baseline_batch(workload, train)
    inputs, target = _batch(workload, train, "training", default_collate)
    val_inputs, val_target = _batch(workload, val, "validation", default_collate)
    for data, role in ((train, "training"), (val, "validation")):
        if workload.collate is None and not is_stream(data):
            _one_shape(workload, data, role)
    if workload.start_trial is not None:
        workload.start_trial(batch_size=len(target), accumulation=1, rank=0, world=1, precision="fp32",
                             train_samples=len(target))
    # a model frozen for serving (an inference study only, build_model says): no optimizer, no backward
    trains = any(p.requires_grad for p in model.parameters())
    try:
        opt = call(workload, "optimizer", model.parameters()) if trains else None  # first, as trials (and Lightning) do
    except WorkloadError as exc:  # optimizer(model) written for the model: say what it is given
        if "'generator' object has no attribute" not in str(exc).partition("\n")[0]:
            raise
        raise _hinted(exc, "optimizer(parameters) is given model.parameters(), a generator of the tensors to "
                           "train, not the model") from None
    if trains and not isinstance(opt, torch.optim.Optimizer):
        scheduled = isinstance(opt, (tuple, list)) and any(isinstance(o, torch.optim.Optimizer) for o in opt)
        raise WorkloadError(f"{workload.where('optimizer')} must return a torch.optim.Optimizer, "
                            f"found {type(opt).__name__}"
                            + (" holding one: return the optimizer alone (a model.py has no learning-rate "
                               "scheduler; a Lightning file's configure_optimizers() may return one, "
                               "docs/workloads.md)" if scheduled else ""))
    model.train()
    seen = _SeenCalls()
    listed = "" if workload.collate is not None or stream else _listed_inputs(train[0])  # a stream: not read again
    try:
        with user_code(f"{workload.where('model')}: the model's forward, on a batch of 2 training samples{listed},"), \
                seen:
            output = forward(model, inputs)
    except WorkloadError as exc:  # float64 inputs to float32 weights read as the model's fault: say whose it is
        hint = _dtype_hint(model, inputs)
        if hint is None:
            raise
        raise _hinted(exc, hint) from None
    if trains:
        value = call(workload, "loss", output, target)
        check_loss(workload, value)
        value.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        if workload.validate is None:  # the metric on validation items, as every trial's evaluation computes it
            try:
                with user_code(f"{workload.where('model')}: the model's forward, in eval mode, on a batch of 2 "
                               "validation samples,"):
                    output = forward(model, val_inputs)
            except WorkloadError as exc:  # the training batch passed: the splits may differ, not the model
                hint = _splits_hint(workload, inputs, val_inputs)
                if hint is None:
                    raise
                raise _hinted(exc, hint) from None
        check_metric(workload, call(workload, "metric", output, val_target) if workload.validate is None
                     else _validate(workload, model, val_inputs, val_target))
    return {
        "train_size": None if stream else len(train),  # a stream has no size: it is read as far as trials need
        "val_size": len(val),
        "train_stream": stream,
        **({"stream_shards_workers": shards_by_worker(train, f"{workload.where('datasets')}: the training stream, "
                                                             "started as DataLoader worker 0 of 2,")}
           if stream else {}),
        "parameters": sum(p.numel() for p in model.parameters()),
        "trainable": trains,  # False: frozen for serving (an inference study only)
        "weights_dtype": weights_dtype(model),  # as model() builds them: apply() refuses the model cast
        "has_conv2d": any(isinstance(m, torch.nn.Conv2d) for m in model.modules()),
        "has_batchnorm": any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules()),
        "linear_layers": sum(linear_like(m) for m in model.modules()),  # transformers' Conv1D too (GPT-2)
        # ... with a weight of their own (not weight_norm's / spectral_norm's): what torchao can quantize
        "own_weight_linear_layers": sum(linear_like(m) and own_weight(m) for m in model.modules()),
        "conv1d_layers": sum(is_conv1d(m) for m in model.modules()),
        "prunable_layers": len(prunable(model)),
        "parametrized_layers": parametrized(model),
        "top_level_blocks": len(blocks(model)),
        "calls_sdpa": seen.sdpa,
        "sdpa_dropout": seen.dropout,  # the largest attention dropout its training forward asked for
        "optimizer_class": type(opt).__name__,
        "optimizer_fused": "fused" in getattr(opt, "defaults", {}),  # torch's classes with a fused kernel
    } | facts | ({"notes": workload.notes(model)} if workload.notes is not None else {})


def _dtype_hint(model: Any, inputs: Any) -> str | None:
    """When the batch's floating inputs are of another dtype than the model's weights (a
    dataset of float64 numpy arrays, say), what to change; else None."""
    import torch

    tensors = _input_tensors(inputs)
    found = next((t.dtype for t in tensors if isinstance(t, torch.Tensor) and t.is_floating_point()), None)
    weights = weights_dtype(model)
    if found is None or weights is None or dtype_name(found) == weights:
        return None
    shown = dtype_name(found)
    return (f"the batch's inputs are {shown} and the model's weights {weights}: have datasets() return {weights} "
            f"inputs (a numpy float64 array: torch.from_numpy(x).float()), or build the model in {shown}")


def _hinted(exc: WorkloadError, hint: str) -> WorkloadError:
    """``exc`` with ``hint`` in brackets at the end of its first line (the user's frames after)."""
    first, _, frames = str(exc).partition("\n")
    return WorkloadError(f"{first} ({hint})\n{frames}".rstrip())


def _splits_hint(workload: Workload, train: Any, val: Any) -> str | None:
    """When the validation batch's input tensors have other shapes than the training
    batch's (beyond the batch dimension), which: the model took the training batch, so
    datasets()' two splits disagree. None when they agree (or cannot be compared)."""
    import torch

    def shapes(inputs: Any) -> str | None:  # per sample: "[6]", "[3, 8, 8], [4]"
        tensors = _input_tensors(inputs)
        if not tensors or not all(isinstance(t, torch.Tensor) for t in tensors):
            return None
        return ", ".join(str(list(t.shape[1:])) for t in tensors)

    a, b = shapes(train), shapes(val)
    if a is None or b is None or a == b:
        return None
    return (f"the training batch passed; {workload.where('datasets')} gives validation inputs of shape "
            f"{b} per sample, the training inputs {a}: its two splits differ")


def _input_tensors(inputs: Any) -> list[Any]:
    """A batch's inputs as a list: the tensor itself, a dict's values or a sequence's items
    ([] for anything else)."""
    import torch

    return [inputs] if isinstance(inputs, torch.Tensor) else list(inputs.values()) if isinstance(
        inputs, dict) else list(inputs) if isinstance(inputs, (list, tuple)) else []


def _batch(workload: Workload, data: Any, role: str, default_collate: Any) -> tuple[Any, Any]:
    """Two items of ``data`` as one (input, target) batch: model.py's collate() (its own
    errors in its own frames), else torch's default collate."""
    where = workload.where("datasets")
    items = first_items(data, 2, f"{where}: the {role} stream, started with iter()," if is_stream(data)
                        else f"{where}: the {role} set")
    if workload.collate is None:
        try:
            return default_collate(items)
        except Exception as exc:
            raise WorkloadError(f"{workload.where('datasets')}: {role} items cannot be batched: {exc}") from None
    with user_code(f"{workload.where('collate')}: on 2 {role} items,"):
        batch = workload.collate(items)
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise WorkloadError(f"{workload.where('collate')} must return (input, target), found {type(batch).__name__}"
                            + (f" of {len(batch)}" if isinstance(batch, (tuple, list)) else ""))
    return batch[0], batch[1]


def _listed_inputs(item: Any) -> str:
    """What to say when an item's input is a plain list of numbers: torch's default collate
    turns it into one tensor per position, which the contract passes as that many arguments
    (a list is a tuple of inputs); '' otherwise."""
    x = item[0] if isinstance(item, (tuple, list)) and len(item) == 2 else None
    if not isinstance(x, list) or not x or not all(isinstance(v, (int, float)) for v in x):
        return ""
    return (f" (each item's input is a list of {len(x)} numbers: torch's default collate makes it {len(x)} tensors, "
            f"passed as {len(x)} arguments; make it one tensor, torch.tensor(values), or define collate())")


SHAPES_CHECKED = 64  # the items whose shapes the preflight compares (a map-style dataset's first)


def _one_shape(workload: Workload, data: Any, role: str) -> None:
    """Torch's default collate stacks a batch's items: they must have one shape. Two items
    alike say too little (a reviewer's items differed from the third on, and the baseline
    trial failed on torch's bare "stack expects each tensor to be equal size"). The first
    ``SHAPES_CHECKED`` items' tensor shapes are compared with the first's."""
    import torch
    from torch.utils._pytree import tree_flatten

    def shapes(item: Any) -> list[Any]:
        leaves, spec = tree_flatten(item)
        return [str(spec)] + [tuple(x.shape) if isinstance(x, torch.Tensor) else None for x in leaves]

    try:
        count = min(SHAPES_CHECKED, len(data))
    except TypeError:  # no len(): the sampler would refuse it first
        return
    items = first_items(data, count, f"{workload.where('datasets')}: the {role} set")
    first = shapes(items[0])
    for i, item in enumerate(items[1:], start=1):
        found = shapes(item)
        if found != first:
            raise WorkloadError(
                f"{workload.where('datasets')}: {role} items differ in shape: item 0 is {_shown(items[0])}, item {i} "
                f"is {_shown(item)}; a batch stacks its items, so give every item one shape (pad or crop it), or "
                "define collate(items) in model.py that batches them (padding, for example)")


def _shown(item: Any) -> str:
    """An item's tensors by their shapes: '([8], 1)'."""
    import torch
    from torch.utils._pytree import tree_map

    described = tree_map(lambda x: list(x.shape) if isinstance(x, torch.Tensor) else x, item)
    return str(described)[:200]


def _check_baseline_batch(workload: Workload, train: Any) -> None:
    """BASELINE's batch must fit in the training set (in one pass of a stream: the stream is
    read that far): every trial starts from it."""
    batch = workload.baseline.get("batch_size")
    if not isinstance(batch, int) or isinstance(batch, bool):
        return
    if not is_stream(train):
        if batch > len(train):
            raise WorkloadError(f"{workload.path}: BASELINE batch_size {batch} is larger than the training set "
                                f"({len(train)} samples from datasets()); expected at most {len(train)}")
        return
    where = workload.where("datasets")
    found = count_up_to(train, batch, f"{where}: the training stream, read for BASELINE's batch of {batch},")
    if found < batch:
        source = workload.names.get("datasets", "datasets()")
        raise WorkloadError(f"{workload.path}: BASELINE batch_size {batch} is larger than one pass of the training "
                            f"stream ({type(train).__name__}, from {source}: it ended after {found} samples); "
                            f"expected at most {found}")


def _validate(workload: Workload, model: Any, inputs: Any, target: Any) -> Any:
    """A workload's own validation (a Lightning file's validation epoch) on the batch."""
    with user_code(f"{workload.where('metric')}: validating a batch of 2 validation samples,"):
        return workload.validate(lambda x: forward(model, x), [(inputs, target)])


def _SeenCalls() -> Any:
    """A torch function mode that notes whether the forward calls
    scaled_dot_product_attention (directly or inside a library's attention), and the
    largest attention dropout it asks for."""
    import torch
    from torch.overrides import TorchFunctionMode

    class SeenCalls(TorchFunctionMode):
        sdpa = False
        dropout = 0.0

        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            if func is torch.nn.functional.scaled_dot_product_attention:
                self.sdpa = True
                self._dropout(args[4] if len(args) > 4 else kwargs.get("dropout_p", 0.0))
            elif func is torch.nn.functional.multi_head_attention_forward and not kwargs.get("need_weights", True):
                self.sdpa = True  # nn.MultiheadAttention without weights runs scaled_dot_product_attention inside
                # (this mode does not see calls made inside a function it handles)
                if kwargs.get("training", True):
                    self._dropout(args[10] if len(args) > 10 else kwargs.get("dropout_p", 0.0))
            return func(*args, **kwargs)

        def _dropout(self, p: Any) -> None:
            if isinstance(p, (int, float)):
                self.dropout = max(self.dropout, float(p))

    return SeenCalls()
