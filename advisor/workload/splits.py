"""model.py's own word on splitting its model between ranks, checked (``user_splits``), and
what the preflight reports about it (``split_facts``): whether tensor parallelism finds a
plan, and how many units a pipeline can cut the model into.

    def tp_plan() -> dict[str, str]     # layer name (``*`` for any one name level) -> style
    def pipeline_split() -> list[str]   # the layers where a pipeline stage may begin

A style is one of ``advisor.workload.tp_plan.STYLES`` ("colwise", "rowwise", ...) or a torch
``ParallelStyle``. Every problem is reported at once, naming the function.
"""

from __future__ import annotations

from typing import Any

from advisor.core.errors import WorkloadError
from advisor.workload.contract import Workload, call
from advisor.workload.defaults import OUTPUT_LOSS
from advisor.workload.structure import pipeline_units
from advisor.workload.tp_plan import check_plan, nearby, refusal

CHECK_WORLD = 2  # the preflight checks a plan's splits for the smallest group: 2 ranks


def user_splits(workload: Workload, model: Any) -> dict[str, Any]:
    """model.py's ``tp_plan()`` and ``pipeline_split()`` (None where it has none), each
    checked against ``model``; raises WorkloadError listing every problem."""
    problems: list[str] = []
    plan = split = None
    if workload.tp_plan is not None:
        plan = call(workload, "tp_plan")
        where = workload.where("tp_plan")
        if not isinstance(plan, dict) or not plan or not all(isinstance(k, str) for k in plan):
            problems.append(f"{where} must return a non-empty dict of layer name -> style (such as "
                            f"{{'mlp.up': 'colwise', 'mlp.down': 'rowwise'}}), found {_describe(plan)}")
        else:
            try:
                check_plan(model, plan, CHECK_WORLD, where)
            except WorkloadError as exc:
                problems.append(str(exc))
    if workload.pipeline_split is not None:
        split = call(workload, "pipeline_split")
        problems.extend(_split_problems(workload.where("pipeline_split"), split, model))
    if problems:
        raise WorkloadError("\n".join(problems))
    return {"tp_plan": plan, "pipeline_split": list(split) if split is not None else None}


def _split_problems(where: str, split: Any, model: Any) -> list[str]:
    if not isinstance(split, (list, tuple)) or not all(isinstance(n, str) for n in split):
        return [(f"{where} must return a list of layer names where a pipeline stage may begin (such as "
                 f"['layers.2', 'layers.4']), found {_describe(split)}")]
    if not split:
        return [(f"{where} returned no layer name: that is one stage, and a pipeline needs at least 2 (name the "
                 "layers where the second and later stages may begin)")]
    names = dict(model.named_modules())
    problems = [f"{where}: {n!r} names no submodule; {nearby(model, n)}" for n in split if not n or n not in names]
    if len(set(split)) != len(split):
        problems.append(f"{where}: names a layer twice: {sorted(n for n in set(split) if split.count(n) > 1)}")
    return problems


def split_facts(workload: Workload, model: Any, splits: dict[str, Any]) -> dict[str, Any]:
    """What the search needs to know before offering model parallelism: why tensor
    parallelism over 2 ranks finds no plan (None when it does), and how many units a
    pipeline can cut the model into (0 where the model cannot be a pipeline)."""
    facts: dict[str, Any] = {"tp_refusal": refusal(model, CHECK_WORLD, splits["tp_plan"])}
    cannot = _pipeline_refusal(workload, model)
    facts["pipeline_units"] = 0 if cannot else len(pipeline_units(model, splits["pipeline_split"]))
    if cannot:
        facts["pipeline_refusal"] = cannot
    return facts


def _pipeline_refusal(workload: Workload, model: Any) -> str | None:
    """Why the model cannot be traced into pipeline stages, whatever its blocks."""
    if workload.kind == "lightning":
        return ("a Lightning file's step runs the module's training_step, loss included: a pipeline needs the "
                "model's forward alone")
    if getattr(workload.module, "LOSS", None) == OUTPUT_LOSS:
        return (f'the model computes its own loss (LOSS = "{OUTPUT_LOSS}") from labels in its inputs; a pipeline '
                "computes the loss on its last stage from the output and the target: give model.py a loss() instead")
    if getattr(getattr(model, "config", None), "use_cache", False):
        return (f"{type(model).__name__} returns a key/value cache (config.use_cache=True), which torch.export cannot "
                "pass between pipeline stages; set config.use_cache = False in model() (training needs no cache)")
    return None


def _describe(obj: Any) -> str:
    return f"a {type(obj).__name__}" + (f" of {len(obj)}" if isinstance(obj, (list, tuple, dict)) else "")
