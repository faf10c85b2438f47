"""Pipeline parallelism (``parallelism: pp``) with ``torch.distributed.pipelining``: the
model is traced (``torch.export``, through ``pipeline()``) on one micro-batch and cut into
stages at the start of chosen units, each rank keeps its stage (two, a loop apart, under
the interleaved schedule) and a schedule (GPipe, 1F1B, interleaved 1F1B) runs the batch
through them in ``pp_microbatches`` micro-batches.

Where a stage may begin: the names ``pipeline_split()`` in model.py lists, else the model's
blocks (``advisor.workload.structure.blocks``: its repeated layers, else its top-level
children). Which of them begin a stage: contiguous runs of units balanced by their
parameter counts (``pp_balance: params``) or by their forward time measured on rank 0
(``time``). The loss is computed on the last stage and shared with every rank each step
(the trial checks it for divergence everywhere); evaluation runs forward-only through the
schedule, and the outputs come out of the last stage only.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import statistics
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from advisor.core.errors import UnsupportedError
from advisor.techniques.model_parallel import pipeline_stages
from advisor.workload.structure import pipeline_units

if TYPE_CHECKING:
    from advisor.techniques.prepared import Prepared

SCHEDULES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B", "interleaved_1f1b": "ScheduleInterleaved1F1B"}


def check_units(prepared: Prepared) -> list[str]:
    """Where the model may be cut; refused when there are fewer units than stages."""
    units = pipeline_units(prepared.module, prepared.hints.get("pipeline_split"))
    stages = pipeline_stages(prepared.config)
    if len(units) < stages:
        raise UnsupportedError(
            f"pipeline parallelism over {stages} stages needs at least {stages} units to cut the model into; it has "
            f"{len(units)} ({_where_units(prepared)})")
    return units


def apply_pp(prepared: Prepared) -> None:
    """Give ``prepared`` a pipeline over its ranks; the model is split now when an example
    batch is at hand (``hints["example_inputs"]``), else at the first step."""
    prepared.step.pipeline = Pipeline(prepared, check_units(prepared), pipeline_stages(prepared.config))
    prepared.ranks = replace(prepared.ranks, dp_rank=0, dp_world=1)  # the first stage takes the whole batch
    if prepared.hints.get("example_inputs") is not None:
        prepared.step.pipeline.build(prepared.hints["example_inputs"])


def _where_units(prepared: Prepared) -> str:
    if prepared.hints.get("pipeline_split") is not None:
        return "the parts pipeline_split() in model.py marks out"
    return "its blocks: repeated layers, else top-level children with parameters"


def balance(weights: list[float], parts: int) -> list[int]:
    """Indices where parts 2..``parts`` begin in ``weights`` (contiguous runs, each non-empty)
    so that the heaviest part is as light as can be.

    Example:
        >>> balance([1, 1, 1, 3], 2)
        [3]
    """
    n = len(weights)
    prefix = [0.0]
    for w in weights:
        prefix.append(prefix[-1] + w)
    # best[k][i]: the lightest heaviest part splitting weights[:i] into k parts
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(parts + 1)]
    cut = [[0] * (n + 1) for _ in range(parts + 1)]
    best[0][0] = 0.0
    for k in range(1, parts + 1):
        for i in range(k, n + 1):
            for j in range(k - 1, i):
                heaviest = max(best[k - 1][j], prefix[i] - prefix[j])
                if heaviest < best[k][i]:
                    best[k][i], cut[k][i] = heaviest, j
    starts, i = [], n
    for k in range(parts, 0, -1):
        i = cut[k][i]
        starts.append(i)
    return sorted(starts)[1:]


class Pipeline:
    """This rank's stages of the pipeline and the schedule that runs them."""

    def __init__(self, prepared: Prepared, units: list[str], stages: int) -> None:
        self.prepared, self.units, self.stages = prepared, units, stages
        self.microbatches = prepared.config.pp_microbatches or stages
        self.is_last = prepared.ranks.rank == prepared.ranks.world - 1
        self.mb_size = 0
        self._train: Any = None
        self._eval: Any = None
        self._stages: list[Any] = []
        self._eval_stages: list[Any] = []
        self._loss_fn: Any = None

    def build(self, inputs: Any) -> None:
        """Trace the model on a micro-batch of ``inputs``, cut it, keep this rank's stages:
        traced twice, in training mode (dropout, batch statistics) for the steps and in
        evaluation mode for ``predict``; both share the model's parameters and buffers."""
        import torch

        from advisor.techniques.prepared import split

        p = self.prepared
        batch = _rows(inputs)
        if batch % self.microbatches:
            raise UnsupportedError(f"a batch of {batch} does not split into pp_microbatches={self.microbatches}")
        self.mb_size = batch // self.microbatches
        example = p.to_device(split(inputs, self.microbatches)[0])
        cuts = [self.units[i] for i in self._cuts(example)]
        model, training = p.module, p.module.training
        indices = list(range(p.ranks.rank, self.stages, p.ranks.world))  # one stage per rank, or a loop's worth each
        try:
            model.train()
            self._stages, module = self._trace(model, example, cuts, indices)
            model.eval()
            self._eval_stages, _ = self._trace(model, example, cuts, indices)
        finally:
            model.train(training)
        p.module = p.model = module[0] if len(module) == 1 else torch.nn.ModuleList(module)
        p.eval_model = None
        p.stats["pipeline"] = {"stages": self.stages, "microbatches": self.microbatches, "schedule": p.config.pp_schedule,
                               "cuts": cuts, "balance": p.config.pp_balance,
                               "stage_parameters": [sum(q.numel() for q in m.parameters()) for m in module]}

    def _trace(self, model: Any, example: Any, cuts: list[str], indices: list[int]) -> tuple[list[Any], list[Any]]:
        """This rank's stages (and their modules) of ``model`` traced on ``example``, cut
        before each of ``cuts``."""
        from torch.distributed.pipelining import pipeline

        args, kwargs = _call_args(example)
        try:
            with _cut_before(model, cuts):
                pipe = pipeline(model, mb_args=args, mb_kwargs=kwargs)
        except Exception as exc:  # noqa: BLE001 - the tracer's refusal is the reason to give
            cause = exc.__cause__ or exc
            raise UnsupportedError(f"pipeline parallelism traces the model with torch.export, which failed: "
                                   f"{type(cause).__name__}: {str(cause).splitlines()[0][:300]}") from None
        if pipe.num_stages != self.stages:
            raise UnsupportedError(f"the traced model splits into {pipe.num_stages} stages, not {self.stages}: the "
                                   f"cut points {cuts} are not each called once, in order")
        modules = [pipe.get_stage_module(i) for i in indices]
        if self.prepared.numerics.amp_dtype is not None:
            for module in modules:
                _send_as_traced(module, self.prepared.numerics.amp_dtype)
        return [pipe.build_stage(i, self.prepared.device) for i in indices], modules

    def _cuts(self, example: Any) -> list[int]:
        """Which units begin a stage: balanced by parameters, or by time measured on rank 0
        and sent to the others (every rank must cut alike)."""
        if self.prepared.config.pp_balance == "params":
            return balance(self._unit_params(), self.stages)
        import torch.distributed as dist

        box = [balance(self._unit_times(example), self.stages) if self.prepared.ranks.rank == 0 else None]
        dist.broadcast_object_list(box, src=0)
        return list(box[0] or ())

    def _unit_params(self) -> list[float]:
        """Each unit's parameter count: the modules from its start to the next unit's, in
        definition order (each parameter counted with the module that holds it)."""
        named = list(self.prepared.module.named_modules())
        order = {name: i for i, (name, _) in enumerate(named)}
        starts = [order[u] if u else 0 for u in self.units] + [len(named)]
        return [float(sum(p.numel() for _, m in named[a:b] for p in m.parameters(recurse=False)))
                for a, b in itertools.pairwise(starts)]

    def _unit_times(self, example: Any, repeats: int = 3) -> list[float]:
        """Each unit's share of a forward pass on the example micro-batch (median of
        ``repeats``): from the call of its first module to the call of the next unit's."""
        from advisor.workload.contract import forward

        module = self.prepared.module
        firsts = [module.get_submodule(u) for u in self.units[1:]]
        samples = []
        for _ in range(repeats):
            marks: dict[int, float] = {}
            handles = [m.register_forward_pre_hook(functools.partial(_mark, marks, i + 1)) for i, m in enumerate(firsts)]
            start = time.perf_counter()
            try:
                with self.prepared.autocast():
                    forward(module, example)
            finally:
                for h in handles:
                    h.remove()
            times = [start, *(marks.get(i + 1, start) for i in range(len(firsts))), time.perf_counter()]
            samples.append([max(0.0, b - a) for a, b in itertools.pairwise(times)])
        return [statistics.median(column) + 1e-9 for column in zip(*samples)]

    def _schedule(self, stages: list[Any], loss_fn: Any) -> Any:
        from torch.distributed import pipelining

        cls = getattr(pipelining, SCHEDULES[self.prepared.config.pp_schedule])
        return cls(stages if len(stages) > 1 else stages[0], n_microbatches=self.microbatches, loss_fn=loss_fn)

    def train_step(self, inputs: Any, target: Any, loss_fn: Any) -> Any:
        """Forward and backward of the whole batch, micro-batch by micro-batch; returns the
        mean loss on every rank (sent from the last stage)."""
        import torch
        import torch.distributed as dist

        if not self._stages:
            self.build(inputs)
        if _rows(inputs) != self.mb_size * self.microbatches:
            raise UnsupportedError(f"a pipeline traced on batches of {self.mb_size * self.microbatches} trains on "
                                   f"batches of that size only, found {_rows(inputs)} (load with drop_last=True)")
        if self._train is None or self._loss_fn is not loss_fn:
            self._train, self._loss_fn = self._schedule(self._stages, loss_fn), loss_fn
        losses: list[Any] = []
        args, kwargs = _call_args(inputs) if self.prepared.ranks.rank == 0 else ((), {})
        target = target if self.is_last else None
        self._train.step(*args, target=target, losses=losses, **kwargs)
        value = (torch.stack([x.detach().float() for x in losses]).mean() if losses
                 else torch.zeros((), device=self.prepared.device))
        dist.broadcast(value, src=self.prepared.ranks.world - 1)
        return value

    def from_last(self, value: float) -> float:
        """``value`` as the last stage has it, on every rank (a metric computed there)."""
        import torch
        import torch.distributed as dist

        box = torch.tensor([value], dtype=torch.float64, device=self.prepared.device)
        dist.broadcast(box, src=self.prepared.ranks.world - 1)
        return float(box.item())

    def predict(self, inputs: Any) -> Any:
        """The model's output for ``inputs`` on the last stage (None on the others). A batch
        smaller than the traced one is padded with copies of its last row, then cut back."""
        from advisor.techniques.prepared import split

        if not self._stages:
            self.build(inputs)
        if self._eval is None:
            self._eval = self._schedule(self._eval_stages, None)
        n, full = _rows(inputs), self.mb_size * self.microbatches
        if n > full:
            outs = [self.predict(part) for part in split(inputs, -(-n // full))]
            return None if outs[0] is None else _concat(outs)
        first = self.prepared.ranks.rank == 0
        args, kwargs = _call_args(_pad(inputs, full) if n < full else inputs) if first else ((), {})
        out = self._eval.eval(*args, **kwargs)
        return _take(out, n) if self.is_last else None


def _send_as_traced(module: Any, amp_dtype: Any) -> None:
    """Under autocast a stage's outputs come out in ``amp_dtype``, while the next stage was
    traced (in fp32) to receive fp32 and its buffers are sized so: without this cast the
    activations crossed the stage boundary garbled (the loss was nan at the first step in
    bf16). Each floating output in ``amp_dtype`` is cast back to fp32 before it is sent."""
    import torch
    from torch.utils._pytree import tree_map_only

    forward = module.forward

    def cast_outputs(*args: Any, **kwargs: Any) -> Any:
        return tree_map_only(torch.Tensor, lambda t: t.float() if t.dtype == amp_dtype else t,
                             forward(*args, **kwargs))

    module.forward = cast_outputs


@contextlib.contextmanager
def _cut_before(model: Any, names: list[str]) -> Iterator[None]:
    """Mark where the tracer cuts: each named module calls ``pipe_split()`` before its
    forward, only while tracing (``pipeline(split_spec=...)`` would patch them for good)."""
    from torch.distributed.pipelining import pipe_split

    patched = []
    for name in names:
        module = model.get_submodule(name)
        own, inner = module.__dict__.get("forward"), module.forward

        def forward(*args: Any, _inner: Any = inner, **kwargs: Any) -> Any:
            pipe_split()
            return _inner(*args, **kwargs)

        module.forward = forward
        patched.append((module, own))
    try:
        yield
    finally:
        for module, own in patched:
            if own is None:
                del module.forward
            else:
                module.forward = own


def _mark(marks: dict[int, float], unit: int, *_: Any) -> None:
    marks.setdefault(unit, time.perf_counter())  # the first call: a unit reached once per forward


def _call_args(inputs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The model's call, as the contract makes it: model(x), model(*x) or model(**x)."""
    if isinstance(inputs, dict):
        return (), dict(inputs)
    if isinstance(inputs, (tuple, list)):
        return tuple(inputs), {}
    return (inputs,), {}


def _rows(batch: Any) -> int:
    import torch

    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0])
    values = list(batch.values()) if isinstance(batch, dict) else list(batch)
    return _rows(values[0])


def _pad(batch: Any, rows: int) -> Any:
    import torch

    if isinstance(batch, torch.Tensor):
        extra = batch[-1:].expand(rows - batch.shape[0], *batch.shape[1:])
        return torch.cat([batch, extra])
    if isinstance(batch, dict):
        return {k: _pad(v, rows) for k, v in batch.items()}
    return type(batch)(_pad(v, rows) for v in batch)


def _take(out: Any, rows: int) -> Any:
    import torch

    if isinstance(out, torch.Tensor):
        return out[:rows]
    if isinstance(out, dict):
        return {k: _take(v, rows) for k, v in out.items()}
    if isinstance(out, (tuple, list)):
        return type(out)(_take(v, rows) for v in out)
    return out


def _concat(outs: list[Any]) -> Any:
    import torch

    first = outs[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(outs)
    if isinstance(first, dict):
        return {k: _concat([o[k] for o in outs]) for k in first}
    return type(first)(_concat(list(parts)) for parts in zip(*outs))
