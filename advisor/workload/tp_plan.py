"""A tensor-parallel plan for a model: which Linear (or Embedding) layers
``torch.distributed.tensor.parallel.parallelize_module`` splits column-wise and which
row-wise, and why the rest stays whole.

A plan comes from one of three places, first found wins:

* the user's own mapping (``tp_plan()`` in model.py), checked name by name;
* a transformers model's declared plan (its ``tp_plan`` property: the class's ``_tp_plan``
  merged with the config's ``base_model_tp_plan``, keys prefixed, ``*`` for every layer);
* derived from the model: a pair of Linear layers with only elementwise operations between
  them (an MLP's up and down projections, a SwiGLU's gate/up and down) becomes
  column-wise then row-wise; an attention module with separate q/k/v projections and an
  output projection becomes q/k/v column-wise, output row-wise, and its head count is
  divided between the ranks (the way torchtitan parallelises Llama).

``advisor.techniques.model_parallel`` applies a plan (``parallelize_module``). A column-wise
layer's output stays a plain tensor holding this rank's columns; whatever
runs between it and its row-wise partner must work on that slice, which is why only
elementwise operations may stand between an MLP's pair (checked on the module's
``torch.fx`` graph) and why attention needs its head count divisible by the world size.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from advisor.core.errors import WorkloadError
from advisor.workload.tp_graph import mlp_pairs

# plan style names, as transformers spells them; only these have a torch ParallelStyle here
STYLES = ("colwise", "rowwise", "colwise_gather_output", "colwise_rep", "rowwise_rep",
          "rowwise_split_input", "embedding_rowwise")
MHA_REASON = ("nn.MultiheadAttention cannot be split by parallelize_module: its q/k/v weights are one "
              "raw Parameter (in_proj_weight), not Linear layers, and its forward calls "
              "F.multi_head_attention_forward with the full head count")
# attention layouts recognised by name: (q, k, v) projections and the output projection
_QKV = (("q_proj", "k_proj", "v_proj"), ("query", "key", "value"), ("wq", "wk", "wv"), ("q", "k", "v"))
_OUT = ("o_proj", "out_proj", "wo", "dense", "proj", "o", "out")
_FUSED = ("in_proj", "qkv", "qkv_proj", "c_attn", "Wqkv", "query_key_value")
_HEADS = ("num_heads", "n_heads", "num_attention_heads", "n_head", "heads")
_KV_HEADS = ("num_key_value_heads", "n_kv_heads", "num_kv_heads")


@dataclass
class TpPlan:
    """``styles``: fqn -> style name (one of STYLES); ``heads``: "fqn.attribute" -> the head
    count one rank keeps (set on the module by ``apply_tp``); ``skipped``: why other layers
    stay whole; ``source``: where the plan came from."""

    styles: dict[str, str] = field(default_factory=dict)
    heads: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    source: str = "derived"


def plan_for(module: Any, world: int, user: dict[str, Any] | None = None) -> TpPlan:
    """The plan for ``module`` over ``world`` ranks: the user's mapping (checked: a bad name
    or an indivisible layer raises WorkloadError), else a transformers model's declared plan,
    else one derived from the model's layers."""
    if user is not None:
        return TpPlan(check_plan(module, user, world, "tp_plan() in model.py"), source="tp_plan() in model.py")
    declared = declared_plan(module)
    if declared:
        return _declared(module, declared, world)
    return derive_plan(module, world)


def refusal(module: Any, world: int, user: dict[str, Any] | None = None) -> str | None:
    """Why tensor parallelism over ``world`` ranks cannot split this model, or None."""
    plan = plan_for(module, world, user)
    if plan.styles:
        return None
    why = "; ".join(plan.skipped) if plan.skipped else "it has no Linear layers in pairs"
    return (f"tensor parallelism found no block to split over {world} ranks (a pair of Linear layers with only "
            f"elementwise operations between them, or attention with q/k/v and output projections): {why}")


def derive_plan(module: Any, world: int) -> TpPlan:
    """The plan read off the model's own layers (see the module docstring)."""
    from torch import nn

    plan = TpPlan()
    taken: set[str] = set()
    for name, sub in module.named_modules():
        where = name or "the model"
        if isinstance(sub, nn.MultiheadAttention):
            plan.skipped.append(f"{where}: {MHA_REASON}")
        else:
            _attention(sub, name, world, plan, taken)
    for name, sub in module.named_modules():
        if any(_under(name, t) for t in taken) or isinstance(sub, nn.MultiheadAttention):
            continue
        for firsts, second in mlp_pairs(sub, plan.skipped, name):
            full = [_join(name, f) for f in (*firsts, second)]
            if any(f in taken for f in full):
                continue
            layers = [sub.get_submodule(f) for f in (*firsts, second)]
            width = layers[-1].in_features
            if width % world:
                plan.skipped.append(f"{full[-1]}: its {width} input features do not divide by {world} ranks")
                continue
            for f in full[:-1]:
                plan.styles[f] = "colwise"
            plan.styles[full[-1]] = "rowwise"
            taken.update(full)
    if not plan.styles and any(type(m).__name__ == "Conv1D" for m in module.modules()):
        plan.skipped.append("its projections are transformers Conv1D layers (GPT-2 style, weight stored transposed), "
                            "not Linear layers; parallelize_module splits only Linear and Embedding layers")
    return plan


def _attention(sub: Any, name: str, world: int, plan: TpPlan, taken: set[str]) -> None:
    """Split ``sub`` if it is attention with separate q/k/v and output projections;
    otherwise say why not in ``plan.skipped`` where it looks like attention."""
    from torch import nn

    children = dict(sub.named_children())
    linear = {k for k, v in children.items() if isinstance(v, nn.Linear)}
    qkv = next((t for t in _QKV if set(t) <= linear), None)
    out = next((o for o in _OUT if o in linear), None)
    fused = next((f for f in _FUSED if f in children), None)
    if qkv is None and fused is not None and out is not None:
        plan.skipped.append(
            f"{_join(name, fused)}: a fused q/k/v projection; column-wise sharding would hand each rank a "
            f"contiguous slice of [q|k|v] rather than its heads of each (that needs a packed style)")
        taken.update({_join(name, fused), _join(name, out)})
        return
    if qkv is None or out is None:
        return
    heads = {a: getattr(sub, a) for a in (*_HEADS, *_KV_HEADS) if isinstance(getattr(sub, a, None), int)}
    where = name or "the model"
    if not any(a in heads for a in _HEADS):
        plan.skipped.append(f"{where}: attention projections {', '.join(qkv)} but no head count attribute "
                            f"({', '.join(_HEADS)}) to divide between the ranks")
        return
    bad = [f"{a}={n}" for a, n in heads.items() if n % world]
    if bad:
        plan.skipped.append(f"{where}: attention head count {', '.join(bad)} does not divide by {world} ranks")
        taken.update(_join(name, f) for f in (*qkv, out))
        return
    layers = [children[f] for f in qkv]
    if any(lin.out_features % world for lin in layers) or children[out].in_features % world:
        plan.skipped.append(f"{where}: attention projection widths do not divide by {world} ranks")
        return
    for f in qkv:
        plan.styles[_join(name, f)] = "colwise"
    plan.styles[_join(name, out)] = "rowwise"
    plan.heads.update({_join(name, a): n // world for a, n in heads.items()})
    taken.update(_join(name, f) for f in (*qkv, out))


def declared_plan(module: Any) -> dict[str, str] | None:
    """A transformers model's own plan (``model.tp_plan``, set by ``post_init``), if any."""
    if not hasattr(module, "supports_tp_plan") or not hasattr(module, "config"):
        return None
    plan = getattr(module, "tp_plan", None) or getattr(module, "_tp_plan", None)
    return dict(plan) if isinstance(plan, dict) and plan else None


def _declared(module: Any, declared: dict[str, str], world: int) -> TpPlan:
    plan = TpPlan(source=f"{type(module).__name__}.tp_plan (transformers)")
    config = getattr(module, "config", None)
    for attr in ("num_attention_heads", "num_key_value_heads"):
        n = getattr(config, attr, None)
        if isinstance(n, int) and n % world:
            plan.skipped.append(f"config.{attr}={n} does not divide by {world} ranks")
    if plan.skipped:
        return plan
    usable = {}
    for key, style in declared.items():
        if style in STYLES:
            usable[key] = style
        else:
            plan.skipped.append(f"{key}: style {style!r} has no torch ParallelStyle here")
    names = expand(module, usable)
    tied = _tied(module, names)
    for fqn in tied:
        plan.skipped.append(f"{fqn}: its weight is tied to another layer's; left whole")
    plan.styles = check_plan(module, {k: v for k, v in names.items() if k not in tied}, world, plan.source)
    return plan


def check_plan(module: Any, plan: dict[str, Any], world: int, source: str) -> dict[str, Any]:
    """``plan`` with ``*`` patterns expanded to module names, every name checked: it must name
    a Linear or Embedding layer, its style must be known, and its split dimension must divide
    by ``world``. All problems are raised together in one WorkloadError."""
    import torch.distributed.tensor.parallel as tp
    from torch import nn

    problems: list[str] = []
    expanded: dict[str, Any] = {}
    for key, style in plan.items():
        matched = expand(module, {key: style})
        if not matched:
            problems.append(f"{key!r} names no submodule; {nearby(module, key)}")
        expanded.update(matched)
    for fqn, style in expanded.items():
        layer = module.get_submodule(fqn)
        if not isinstance(layer, (nn.Linear, nn.Embedding)):
            problems.append(f"{fqn!r} is a {type(layer).__name__}; only Linear and Embedding layers can be split")
            continue
        if not isinstance(style, tp.ParallelStyle) and style not in STYLES:
            problems.append(f"{fqn!r}: unknown style {style!r}; one of {', '.join(STYLES)} or a ParallelStyle")
            continue
        dim = _split_size(layer, style)
        if dim is not None and dim % world:
            problems.append(f"{fqn!r}: the split dimension ({dim}) does not divide by {world} ranks")
    if problems:
        raise WorkloadError(f"{source}: the tensor-parallel plan is invalid:\n"
                            + "\n".join(f"  - {p}" for p in problems))
    return expanded


def expand(module: Any, plan: dict[str, Any]) -> dict[str, Any]:
    """Plan keys with ``*`` (fnmatch, one name level each, as parallelize_module reads them)
    replaced by the module names they match; a key that matches nothing is dropped."""
    from fnmatch import fnmatchcase

    names = [n for n, _ in module.named_modules() if n]
    out: dict[str, Any] = {}
    for key, style in plan.items():
        parts = key.split(".")
        for name in names:
            tokens = name.split(".")
            if len(tokens) == len(parts) and all(fnmatchcase(t, p) for t, p in zip(tokens, parts)):
                out[name] = style
    return out


def _split_size(layer: Any, style: Any) -> int | None:
    from torch import nn

    if not isinstance(style, str):
        return None
    rows = style.startswith("rowwise") or style == "embedding_rowwise"
    if isinstance(layer, nn.Embedding):
        return int(layer.num_embeddings if rows else layer.embedding_dim)
    return int(layer.in_features if rows else layer.out_features)


def _tied(module: Any, names: dict[str, Any]) -> set[str]:
    owners: dict[int, list[str]] = {}
    for fqn in names:
        owners.setdefault(id(module.get_submodule(fqn).weight), []).append(fqn)
    seen: dict[int, int] = {}
    for _, sub in module.named_modules(remove_duplicate=False):
        w = getattr(sub, "weight", None)
        if w is not None and id(w) in owners:
            seen[id(w)] = seen.get(id(w), 0) + 1
    return {f for key, fqns in owners.items() if seen.get(key, 0) > 1 for f in fqns}


def nearby(module: Any, key: str) -> str:
    parts = key.split(".")
    for cut in range(len(parts) - 1, -1, -1):
        parent = ".".join(parts[:cut])
        try:
            sub = module.get_submodule(parent)
        except AttributeError:
            continue
        children = [n for n, _ in sub.named_children()]
        close = difflib.get_close_matches(parts[cut], children, n=1)
        hint = f" (did you mean {_join(parent, close[0])!r}?)" if close else ""
        return f"{parent or 'the model'!r} has {', '.join(children) or 'no children'}{hint}"
    return "the model has no such path"


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _under(name: str, parent: str) -> bool:
    return name == parent or name.startswith(parent + ".")
