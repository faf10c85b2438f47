"""Which knob options ``advisor doctor`` runs, and each one's run: every option this
machine offers (``advisor hardware``) except the reference's own values, as the reference
with that one knob changed (as the default strategy's seeds are), plus what the option
cannot run without.

What it needs comes from the shipped presets' ``when`` conditions: its own condition
(``comm_hook`` needs ``parallelism: ddp``), and the knobs the change switches on whose
default the presets never choose (``parallelism: ddp`` runs with ``devices: 2``). A knob
with no condition in the presets that still cannot run alone (a DDP-only setting; on CUDA
the flash and cuDNN attention kernels, which take fp16 / bf16 only) gets the first other
offered option that makes it runnable (there: bf16, or fp16 where bf16 is not offered). The run without the option (its
context) tells whether a failure is the option's own (``advisor.study.doctor.checkup``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from advisor.core.config import TrialConfig
from advisor.machine.hardware import Hardware
from advisor.search.space import load_space
from advisor.techniques.registry import TECHNIQUES
from advisor.techniques.rules import capability_table, refusal


@dataclass(frozen=True)
class Option:
    """One option to run: its run (``config``), and the run without it when the option
    needs other knobs set (``context``); ``config`` None: not run, ``note`` says why."""

    knob: str
    value: Any
    workload: str
    config: TrialConfig | None
    context: TrialConfig | None = None
    note: str = ""

    @property
    def label(self) -> str:
        return f"{self.knob}={json.dumps(self.value)}"


def changes(config: TrialConfig | None, base: TrialConfig) -> dict[str, Any]:
    """The knobs ``config`` sets differently from ``base``."""
    return {} if config is None else config.changed(base)


def _presets() -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """Each knob's condition (``when``) in the shipped presets, ``default`` first, and
    every value any preset chooses for it."""
    from advisor import search_spaces

    when: dict[str, Any] = {}
    chosen: dict[str, list[Any]] = {}
    names = search_spaces.names()
    for name in ["default"] * ("default" in names) + [n for n in names if n != "default"]:
        for knob in load_space(name).knobs:
            if knob.when and knob.name not in when:
                when[knob.name] = knob.when
            chosen.setdefault(knob.name, []).extend(c for c in knob.choices if c not in chosen[knob.name])
    return when, chosen


def plan_options(hw: Hardware, base: TrialConfig, facts: dict[str, Any], knobs: list[str] | None = None,
                 serving: bool = False) -> list[Option]:
    """Every option ``hw`` offers (of ``knobs``, or all), except the reference's own
    values, with its run: as a training run, unless the option is for inference only
    or the model is ``serving`` (frozen: inference runs only, training options not run).
    ``facts`` (the model's preflight) rule out the options pointless for the model."""
    rows = capability_table(hw)
    offered: dict[str, list[Any]] = {}
    for r in rows:
        if r.available and TECHNIQUES[r.key].applies(hw) is None:
            offered.setdefault(r.key, []).append(r.value)
    when, chosen = _presets()
    out = []
    for r in rows:
        if (knobs is not None and r.key not in knobs) or r.value not in offered.get(r.key, []):
            continue
        if getattr(base, r.key) == r.value:
            continue  # the reference itself
        kinds = r.workloads.split(", ") if r.workloads else []
        if serving and kinds and "inference" not in kinds:
            out.append(Option(r.key, r.value, kinds[0], None, note="not run: a training option, and this model is "
                              "frozen for serving (no trainable parameter)"))
        elif kinds:
            out.append(_option(r.key, r.value, "inference" if serving else kinds[0], base, facts, hw.device, offered,
                               when, chosen))
    return out


def _option(key: str, value: Any, kind: str, base: TrialConfig, facts: dict[str, Any], device: str,
            offered: dict[str, list[Any]], when: dict[str, Any], chosen: dict[str, list[Any]]) -> Option:
    pointless = TECHNIQUES[key].pointless(value, facts)
    if pointless:
        return Option(key, value, kind, None, note=f"not run: {pointless}")
    start, own = base.to_dict(), {}
    for other, wanted in when.get(key, ()):  # the option's own condition in the presets
        accepted = wanted if isinstance(wanted, tuple) else (wanted,)
        if start[other] not in accepted:
            usable = [v for v in accepted if v in offered.get(other, [])]
            if not usable:
                return Option(key, value, kind, None, note=f"not run: needs {other} in {list(accepted)}, not offered here")
            own[other] = usable[0]
    # Refused even so (a knob with no condition in the presets yet, such as a DDP-only
    # setting, or one this device runs only with another knob: the CUDA flash attention
    # kernel in bf16): the first other offered option that makes it runnable is its context.
    extras: list[dict[str, Any]] = [{}] + [{k: v} for k, vs in offered.items() if k != key and k not in own for v in vs if v != start[k]]
    first = ""
    for extra in extras:
        context = own | extra
        try:
            config = TrialConfig.from_dict(_switched_on(start | context | {key: value}, start, when, chosen, offered,
                                                        keep=key))
            ctx = TrialConfig.from_dict(_switched_on(start | context, start, when, chosen, offered)) if context else None
        except ValueError as exc:
            first = first or str(exc)
            continue
        reason = refusal(config, kind, device)
        if reason:
            first = first or f"cannot run alone: {reason}"
            continue
        if ctx is not None and refusal(ctx, kind, device):
            ctx = config  # the knobs it needs cannot run without it: judged together
        return Option(key, value, kind, config, ctx)
    return Option(key, value, kind, None, note=f"not run: {first}")


def _switched_on(values: dict[str, Any], base: dict[str, Any], when: dict[str, Any], chosen: dict[str, list[Any]],
                 offered: dict[str, list[Any]], keep: str | None = None) -> dict[str, Any]:
    """``values`` where each knob the change switched on (its condition holds now, not at
    the reference) and whose value no preset chooses takes the first offered one; ``keep``
    (the option being run) keeps its value."""
    def holds(conditions: Any, v: dict[str, Any]) -> bool:
        return all(v[o] in w if isinstance(w, tuple) else v[o] == w for o, w in conditions)

    out = dict(values)
    for knob, conditions in when.items():
        if knob == keep:
            continue
        if holds(conditions, out) and not holds(conditions, base) and out[knob] not in chosen.get(knob, [out[knob]]):
            usable = [v for v in chosen[knob] if v in offered.get(knob, [])]
            if not usable:
                raise ValueError(f"needs {knob} in {chosen[knob]}, none offered here")
            out[knob] = usable[0]
    return out
