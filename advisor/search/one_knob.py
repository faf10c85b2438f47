"""The default search strategy's first trials ("seeds"): the baseline with one knob changed, the
levers that most often pay off first. A small budget in a large categorical space is
otherwise spent on random start-up trials that change many knobs at once; measured on a
recorded grid (benchmarks/search_efficiency.py), these seeds let the sampler start from
what each lever alone does."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from advisor.core.config import TrialConfig
from advisor.techniques.rules import refusal

if TYPE_CHECKING:
    from advisor.search.space import SearchSpace

# Knobs tried first, in this order; other knobs follow in the space's order.
PRIORITY = ("precision", "channels_last", "compile", "batch_size", "quantization", "grad_accumulation",
            "activation_checkpointing", "pruning", "threads")


def seed_count(trials: int) -> int:
    """How many seed trials a study of ``trials`` trials starts with: a third, 3 to 5.
    Past five, the model of the knobs' effects (``advisor.search.effects``) tries the other
    changes in the company of the best configurations found, which is worth more than each
    one alone against the baseline: on the recorded CNN grid, a cap of 5 instead of 8
    reaches 0.90 of the front's hypervolume in 13 proposals, not 0.87 (benchmarks/README.md)."""
    return max(3, min(5, trials // 3))


def seed_configs(space: SearchSpace, base: TrialConfig, limit: int, workload: str = "train",
                 device: str | None = None) -> list[TrialConfig]:
    """Up to ``limit`` configurations of ``space``: ``base`` with one knob changed each.

    First one value per knob (for ``batch_size`` twice the baseline's, or half), in
    ``PRIORITY`` order (a knob the change brings into play takes its first choice); then the knobs' other values in the same order. Values that cannot
    run as ``workload``, or with the baseline's other knobs where trials run on ``device``
    (the CUDA flash attention kernel with an fp32 baseline), are left out.

    Example:
        >>> [c.precision for c in seed_configs(load_space("quick"), TrialConfig(), 1)]  # doctest: +SKIP
        ['tf32']
    """
    knobs = {k.name: k for k in space.knobs}
    order = [k for k in PRIORITY if k in knobs] + [k for k in knobs if k not in PRIORITY]
    values = base.to_dict()
    candidates: list[list[TrialConfig]] = []
    for name in order:
        knob = knobs[name]
        if not knob.active(values):
            continue
        choices = [v for v in knob.choices if v != values[name]]
        if name == "batch_size":
            choices.sort(key=lambda b: (b not in (2 * base.batch_size, base.batch_size // 2), b < base.batch_size, b))
        candidates.append(_set(base, knob, choices, space, workload, device))
    first = [options[0] for options in candidates if options]
    rest = [c for options in candidates for c in options[1:]]
    return (first + rest)[:limit]


def neighbours(space: SearchSpace, config: TrialConfig, workload: str = "train",
               device: str | None = None) -> list[TrialConfig]:
    """Every configuration of ``space`` that is ``config`` with one active knob changed
    (with the knobs the change brings into play), leaving out those that cannot run as
    ``workload`` on ``device``."""
    values = config.to_dict()
    return [c for knob in space.knobs if knob.active(values)
            for c in _set(config, knob, [v for v in knob.choices if v != values[knob.name]], space, workload, device)]


def _set(config: TrialConfig, knob: Any, choices: list[Any], space: SearchSpace, workload: str,
         device: str | None) -> list[TrialConfig]:
    """``config`` with ``knob`` at each of ``choices`` (validated when the space was loaded)
    and the knobs that brings into play, leaving out what cannot run as ``workload`` on ``device``."""
    values = config.to_dict()
    out = []
    for value in choices:
        candidate = _with_dependents(config.replace(**{knob.name: value}), space.knobs, values, workload, device)
        if refusal(candidate, workload, device) is None:
            out.append(candidate)
    return out


def _with_dependents(config: TrialConfig, knobs: Any, before: dict[str, Any], workload: str,
                     device: str | None) -> TrialConfig:
    """``config`` with the knobs its change brought into play (each whose condition now
    holds, and did not, at a value that is none of its choices) set to the first of their
    choices, in order, that can run: the seed ``parallelism=ddp`` comes with ``devices`` 2,
    not the baseline's single device; ``fsdp_tp`` with the first devices / tp_size pair that
    makes a 2-D mesh."""
    values = config.to_dict()
    woken = [k for k in knobs if k.active(values) and not k.active(before) and values[k.name] not in k.choices]
    if not woken:
        return config
    tries = itertools.islice(itertools.product(*(k.choices for k in woken)), 64)
    fits = (config.replace(**{k.name: v for k, v in zip(woken, combo)}) for combo in tries)
    return next((c for c in fits if refusal(c, workload, device) is None), config)
