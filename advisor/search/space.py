"""Search spaces: YAML -> validated SearchSpace; capability filter; define-by-run sampling.

A space file maps knob names (the fields of TrialConfig) to one of::

    knob: {choices: [a, b, c]}            # categorical
    knob: {low: 16, high: 512}            # the powers of two in [low, high] (integer knobs)
    knob: value                           # fixed
    knob: {choices: [...], when: {other: value}}   # conditional: sampled only if other == value
    knob: {choices: [...], when: {other: [a, b]}}  # ... or if other is one of the listed values

Every problem in a file is reported at once (SpaceError.problems).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from advisor.core.config import DOMAINS, TrialConfig, unknown_knob_hint, validate_values
from advisor.core.errors import SpaceError
from advisor.techniques.registry import TECHNIQUES

if TYPE_CHECKING:
    import optuna

    from advisor.machine.hardware import Hardware

_SPEC_KEYS = {"choices", "low", "high", "when"}
_POW2_KNOBS = {"batch_size", "threads"}
_DEFAULT = TrialConfig()


@dataclass(frozen=True)
class Knob:
    name: str
    choices: tuple[Any, ...]
    when: tuple[tuple[str, Any], ...] = ()

    def active(self, values: dict[str, Any]) -> bool:
        return all(values.get(k) in v if isinstance(v, tuple) else values.get(k) == v for k, v in self.when)


@dataclass(frozen=True)
class Dropped:
    knob: str
    value: Any
    reason: str


@dataclass(frozen=True)
class SearchSpace:
    """Knobs in sampling order. Knobs not listed keep TrialConfig's defaults."""

    name: str
    knobs: tuple[Knob, ...]
    dropped: tuple[Dropped, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k in self.knobs:
            spec: dict[str, Any] = {"choices": list(k.choices)}
            if k.when:
                spec["when"] = {o: list(v) if isinstance(v, tuple) else v for o, v in k.when}
            out[k.name] = spec
        return out

    def sample(self, trial: optuna.Trial, base: TrialConfig | None = None) -> TrialConfig:
        """Define-by-run: suggest each active knob in order; inactive ones keep defaults.

        With ``base`` (the baseline), only the knobs whose base value lies in the space
        are suggested (the study enqueues exactly those values, ``enqueue_params``); the
        others keep the base value.
        """
        values = (base or TrialConfig()).to_dict()
        suggest = self.enqueue_params(base) if base is not None else None
        for knob in self.knobs:
            if not _switched_off(knob, values) and (suggest is None or knob.name in suggest):
                values[knob.name] = trial.suggest_categorical(knob.name, list(knob.choices))
        return TrialConfig.from_dict(values)

    def as_sampled(self, config: TrialConfig) -> TrialConfig:
        """``config`` as ``sample`` hands it out: a knob whose condition does not hold takes
        its default (a configuration that turned ``compile`` off keeps no ``compile_mode``)."""
        values = config.to_dict()
        for knob in self.knobs:
            _switched_off(knob, values)
        return config if values == config.to_dict() else TrialConfig.from_dict(values)

    def enqueue_params(self, base: TrialConfig) -> dict[str, Any]:
        """The knob values of ``base`` that lie in this space (for study.enqueue_trial)."""
        values = base.to_dict()
        return {k.name: values[k.name] for k in self.knobs
                if k.active(values) and values[k.name] in k.choices}

    def configs(self, limit: int = 100_000) -> list[TrialConfig]:
        """Every point of the space (conditional knobs expanded), up to ``limit``."""
        points: list[dict[str, Any]] = [TrialConfig().to_dict()]
        for knob in self.knobs:
            nxt = []
            for p in points:
                if knob.active(p):
                    nxt.extend({**p, knob.name: c} for c in knob.choices)
                else:
                    nxt.append(p)
            points = nxt
            if len(points) > limit:
                break
        return [TrialConfig.from_dict(p) for p in points[:limit]]

    def size(self) -> int:
        """The number of distinct configurations, counted without listing them: the knobs
        that conditions refer to are enumerated, the others multiply in."""
        import itertools
        import math

        parents = {o for k in self.knobs for o, _ in k.when}
        parent_knobs = [k for k in self.knobs if k.name in parents]
        total = 0
        defaults = TrialConfig().to_dict()
        for combo in itertools.product(*(k.choices for k in parent_knobs)):
            values, skip = dict(defaults), False
            for knob, value in zip(parent_knobs, combo):  # in dependency order
                if knob.active(values):
                    values[knob.name] = value
                elif value != knob.choices[0]:  # an inactive parent keeps its default: count once
                    skip = True
                    break
            if not skip:
                total += math.prod(len(k.choices) for k in self.knobs if k.name not in parents and k.active(values))
        return total


def _switched_off(knob: Knob, values: dict[str, Any]) -> bool:
    """Whether ``knob``'s condition fails on ``values`` (in the space's order); if so it is
    set to its default there."""
    if knob.active(values):
        return False
    values[knob.name] = getattr(_DEFAULT, knob.name)
    return True


def load_space(name_or_path: str) -> SearchSpace:
    """Load a shipped preset by name (``default``) or a YAML file by path; validate it."""
    from advisor import search_spaces

    text = search_spaces.read(name_or_path) if "/" not in name_or_path and not name_or_path.endswith((".yaml", ".yml")) else None
    if text is not None:
        source, name = f"preset {name_or_path!r}", name_or_path
    else:
        path = Path(name_or_path)
        if path.is_dir():
            raise SpaceError(name_or_path, ["is a directory, expected a search space YAML file or a preset "
                                            f"({', '.join(search_spaces.names())})"])
        if not path.is_file():
            raise SpaceError(name_or_path, [
                f"no such file, and not a shipped preset (presets: {', '.join(search_spaces.names())})"])
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise SpaceError(str(path), [f"cannot read: {exc}"]) from None
        source, name = str(path), path.stem
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpaceError(source, [f"not valid YAML: {exc}"]) from None
    return parse_space(data, name, source)


def parse_space(data: Any, name: str, source: str) -> SearchSpace:
    """Validate a space mapping; collect every problem and raise them together."""
    if not isinstance(data, dict) or not data:
        raise SpaceError(source, [f"expected a mapping of knob: spec, found {type(data).__name__ if data is not None else 'an empty file'}"])
    problems: list[str] = []
    knobs: list[Knob] = []
    known = TrialConfig.keys()
    for key, spec in data.items():
        if key not in known:
            problems.append(f"{key}: unknown knob ({unknown_knob_hint(key)})")
            continue
        knob = _parse_knob(str(key), spec, problems)
        if knob is not None:
            knobs.append(knob)
    names = {k.name: k for k in knobs}
    for knob in knobs:
        for other, value in knob.when:
            if other not in known:
                problems.append(f"{knob.name}.when: unknown knob {other!r} ({unknown_knob_hint(other)})")
            elif other not in names:
                problems.append(f"{knob.name}.when: {other!r} is not a knob of this space")
            elif other == knob.name:
                problems.append(f"{knob.name}.when: a knob cannot depend on itself")
            else:
                wanted = value if isinstance(value, tuple) else (value,)
                bad = [p for v in wanted for p in validate_values({other: v}, f"{knob.name}.when")]
                problems.extend(bad)
                choices = names[other].choices
                if not bad and not set(map(repr, wanted)) & set(map(repr, choices)):
                    # else filtering blamed the machine: "only used when ..., which cannot run here"
                    shown = list(wanted) if len(wanted) > 1 else wanted[0]
                    problems.append(f"{knob.name}.when: {other} is {shown!r}, which {other}'s choices "
                                    f"{list(choices)} never take: {knob.name} would never be tried")
    if problems:
        raise SpaceError(source, problems)
    return SearchSpace(name, tuple(_order_by_dependencies(knobs)))


def _parse_knob(key: str, spec: Any, problems: list[str]) -> Knob | None:
    if not isinstance(spec, dict):
        spec = {"choices": [spec]}  # a fixed value
    unknown = set(spec) - _SPEC_KEYS
    if unknown:
        problems.append(f"{key}: unknown field(s) {sorted(unknown)} (expected choices, or low and high; optional when)")
        return None
    when = spec.get("when") or {}
    if not isinstance(when, dict):
        problems.append(f"{key}.when: expected a mapping such as {{compile: true}}, found {type(when).__name__}")
        when = {}
    if "choices" in spec and ("low" in spec or "high" in spec):
        problems.append(f"{key}: give either choices or low/high, not both")
        return None
    if "choices" in spec:
        choices = spec["choices"]
        if not isinstance(choices, list):
            problems.append(f"{key}.choices: expected a list, found {type(choices).__name__}")
            return None
        if not choices:
            problems.append(f"{key}.choices: is empty (give at least one value)")
            return None
        checks = (DOMAINS[key].check(c) for c in choices)
        bad = [f"{key}.choices: {error}" for error in checks if error]
        problems.extend(bad)
        if len({repr(c) for c in choices}) != len(choices):
            problems.append(f"{key}.choices: has duplicate values {choices}")
        return None if bad else Knob(key, tuple(choices), _when(when))
    return _parse_range(key, spec, when, problems)


def _when(when: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """Conditions as hashable pairs; a list of accepted values becomes a tuple."""
    return tuple((str(k), tuple(v) if isinstance(v, list) else v) for k, v in when.items())


def _parse_range(key: str, spec: dict[str, Any], when: dict[str, Any], problems: list[str]) -> Knob | None:
    if key not in _POW2_KNOBS:
        problems.append(f"{key}: low/high ranges are for {sorted(_POW2_KNOBS)}; use choices")
        return None
    low, high = spec.get("low"), spec.get("high")
    ok = True
    for field_name, v in (("low", low), ("high", high)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            problems.append(f"{key}.{field_name}: expected a positive integer, found {v!r}")
            ok = False
    if not ok:
        return None
    if low > high:
        problems.append(f"{key}: low ({low}) is greater than high ({high})")
        return None
    values = [2**i for i in range(0, high.bit_length() + 1) if low <= 2**i <= high]
    if not values:
        problems.append(f"{key}: no power of two lies in [{low}, {high}]")
        return None
    return Knob(key, tuple(values), _when(when))


def _order_by_dependencies(knobs: list[Knob]) -> list[Knob]:
    """Knobs a condition refers to are sampled before the knobs that depend on them."""
    ordered: list[Knob] = []
    pending = list(knobs)
    while pending:
        placed = {k.name for k in ordered}
        ready = [k for k in pending if all(o in placed for o, _ in k.when)]
        if not ready:  # a cycle: keep file order (validation already reported self-loops)
            ready = pending[:1]
        ordered.extend(ready)
        pending = [k for k in pending if k not in ready]
    return ordered


def value_refusal(knob: str, value: Any, hw: Hardware, facts: dict[str, Any]) -> str | None:
    """Why a technique knob's ``value`` cannot run on ``hw``, for the workload, or can do
    nothing for this model (``facts`` from the preflight, with ``device`` and ``workload``);
    None when it may. The rule ``filter_space`` drops options by, and BASELINE is checked by."""
    technique = TECHNIQUES[knob]
    return (technique.unavailable(value, hw) or technique.wrong_workload(value, facts.get("workload", "train"))
            or technique.pointless(value, facts))


def filter_space(space: SearchSpace, hw: Hardware, facts: dict[str, Any] | None = None) -> SearchSpace:
    """Drop the options ``hw`` cannot run, and those the workload (``facts`` from the
    preflight) rules out: batch sizes over the training set, a technique's pointless values.

    Raises SpaceError when a knob would be left with no option at all: the user is
    told what cannot run here instead of getting a silently empty space.
    """
    kept: list[Knob] = []
    dropped: list[Dropped] = []
    problems: list[str] = []
    facts = (facts or {}) | {"device": hw.device}  # what a technique's pointless() may weigh
    workload = facts.get("workload", "train")
    data = "validation" if workload == "inference" else "training"
    max_batch_size = facts.get("val_size" if workload == "inference" else "train_size")
    removed: set[str] = set()
    for knob in space.knobs:  # dependency order: a condition's knob is filtered first
        unmet = _unmet_condition(knob, {k.name: k for k in kept}, removed)
        if unmet:  # its condition can no longer hold: the knob keeps its default
            dropped.extend(Dropped(knob.name, value, unmet) for value in knob.choices)
            removed.add(knob.name)
            continue
        not_here = TECHNIQUES[knob.name].applies(hw) if knob.name in TECHNIQUES else None
        if not_here:  # the knob means nothing on this hardware: remove it, keep its default
            dropped.extend(Dropped(knob.name, value, not_here) for value in knob.choices)
            removed.add(knob.name)
            continue
        keep = []
        for value in knob.choices:
            if knob.name == "batch_size":
                reason = (f"larger than the {data} set ({max_batch_size} samples)"
                          if max_batch_size is not None and value > max_batch_size else None)
            else:
                reason = value_refusal(knob.name, value, hw, facts)
            if reason:
                dropped.append(Dropped(knob.name, value, reason))
            else:
                keep.append(value)
        if not keep:
            reasons = "; ".join(f"{d.value!r}: {d.reason}" for d in dropped if d.knob == knob.name)
            problems.append(f"{knob.name}: no option can run on this machine ({reasons})")
        kept.append(replace(knob, choices=tuple(keep)))
    if problems:
        raise SpaceError(f"{space.name!r} on this machine", problems)
    return SearchSpace(space.name, tuple(kept), space.dropped + tuple(dropped))


def _unmet_condition(knob: Knob, kept: dict[str, Knob], removed: set[str]) -> str | None:
    """Why ``knob``'s condition can never hold after filtering, or None if it still can."""
    defaults = TrialConfig().to_dict()
    for other, wanted in knob.when:
        accepted = wanted if isinstance(wanted, tuple) else (wanted,)
        possible = kept[other].choices if other in kept else (defaults[other],)
        if not set(map(repr, accepted)) & set(map(repr, possible)):
            shown = list(accepted) if len(accepted) > 1 else accepted[0]
            return f"only used when {other} is {shown}, which cannot run here"
    return None

