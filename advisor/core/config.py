"""TrialConfig: one point of the search space, and the value domain of every knob.

The domains here say which values a knob can take at all (``precision`` is one of five
names, ``devices`` a positive integer); whether this machine can run a value, and what it
does to a model, is each technique's business (``advisor.techniques``).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any

from advisor.core.errors import ConfigError


@dataclass(frozen=True)
class Choice:
    """A knob whose value is one of ``values`` (booleans stay booleans: 1 is not True)."""

    values: tuple[Any, ...]

    def check(self, value: Any) -> str | None:
        same_kind = isinstance(value, bool) == isinstance(self.values[0], bool)
        if value in self.values and same_kind:
            return None
        return f"expected one of {list(self.values)}, found {value!r}"


@dataclass(frozen=True)
class Integer:
    """A knob whose value is an integer >= ``minimum`` (or None, when ``optional``)."""

    minimum: int
    optional: bool = False
    none_means: str = ""

    def check(self, value: Any) -> str | None:
        if value is None and self.optional:
            return None
        if isinstance(value, int) and not isinstance(value, bool) and value >= self.minimum:
            return None
        if self.optional:
            return f"expected a positive integer (or null for {self.none_means}), found {value!r}"
        if self.minimum == 1:
            return f"expected a positive integer, found {value!r}"
        return f"expected an integer >= {self.minimum}, found {value!r}"


@dataclass(frozen=True)
class Fraction:
    """A knob whose value is a float strictly between 0 and 1."""

    def check(self, value: Any) -> str | None:
        if isinstance(value, float) and 0.0 < value < 1.0:
            return None
        return f"expected a fraction between 0 and 1 (exclusive), such as 0.5, found {value!r}"


Domain = Choice | Integer | Fraction


def knob(default: Any, domain: Domain) -> Any:
    """A TrialConfig field: its default and its domain (``DOMAINS`` is read from these)."""
    return field(default=default, metadata={"domain": domain})


@dataclass(frozen=True)
class TrialConfig:
    """One configuration of the knobs. Defaults are the plain fp32 eager setup on one device.

    ``batch_size`` is the global batch of one optimizer step: with ``data_ranks()`` replicas
    of the model and ``grad_accumulation`` micro-steps each replica runs ``batch_size /
    (data_ranks() * grad_accumulation)`` samples per forward pass. Configs stored by older
    versions (fewer fields) load with the defaults for the new fields. Each field is a
    knob: its default and its domain, the values it can take at all (a new knob is one line
    here, its technique module and its place in ``advisor.techniques.registry.APPLY_ORDER``).

    Example:
        >>> TrialConfig(batch_size=128, precision="bf16").to_dict()["precision"]
        'bf16'
    """

    batch_size: int = knob(64, Integer(1))
    precision: str = knob("fp32", Choice(("fp32", "tf32", "bf16", "fp16", "bf16_full")))
    threads: int | None = knob(None, Integer(1, optional=True, none_means="torch's default"))
    channels_last: bool = knob(False, Choice((False, True)))
    compile: bool = knob(False, Choice((False, True)))
    compile_mode: str = knob("default", Choice(("default", "reduce-overhead", "max-autotune-no-cudagraphs",
                                                "max-autotune")))
    parallelism: str = knob("single", Choice(("single", "ddp", "fsdp", "tp", "pp", "fsdp_tp")))
    devices: int = knob(1, Integer(1))
    tp_size: int = knob(1, Integer(1))
    pp_schedule: str = knob("1f1b", Choice(("1f1b", "gpipe", "interleaved_1f1b")))
    pp_microbatches: int | None = knob(None, Integer(1, optional=True, none_means="one per pipeline stage"))
    pp_balance: str = knob("params", Choice(("params", "time")))
    comm_hook: str = knob("none", Choice(("none", "fp16", "bf16")))
    bucket_mb: int = knob(25, Integer(1))
    pruning: str = knob("none", Choice(("none", "l1_unstructured", "ln_structured", "semi_structured_2_4")))
    prune_amount: float = knob(0.5, Fraction())
    quantization: str = knob("none", Choice(("none", "qat_int8", "fp8_training", "int8_dynamic", "int8_weight_only",
                                             "int4_weight_only", "fp8")))
    activation_checkpointing: bool = knob(False, Choice((False, True)))
    grad_accumulation: int = knob(1, Integer(1))
    num_workers: int = knob(0, Integer(0))
    pin_memory: bool = knob(False, Choice((False, True)))
    fused_optimizer: bool = knob(False, Choice((False, True)))
    ddp_static_graph: bool = knob(False, Choice((False, True)))
    ddp_bucket_view: bool = knob(False, Choice((False, True)))
    sync_batchnorm: bool = knob(False, Choice((False, True)))
    fsdp_mixed_precision: str = knob("none", Choice(("none", "bf16")))
    fsdp_reshard: bool = knob(True, Choice((True, False)))
    cudnn_benchmark: bool = knob(False, Choice((False, True)))
    expandable_segments: bool = knob(False, Choice((False, True)))
    sdpa_backend: str = knob("default", Choice(("default", "math", "flash", "efficient", "cudnn")))
    fp8_scaling: str = knob("tensorwise", Choice(("tensorwise", "rowwise")))
    compile_optimizer: bool = knob(False, Choice((False, True)))

    @classmethod
    def keys(cls) -> list[str]:
        return list(_NAMES)

    def to_dict(self) -> dict[str, Any]:
        # every field holds a plain scalar: no deep copy (dataclasses.asdict's was most of the
        # driver's own CPU in a study, where keys and changes are taken thousands of times)
        return {name: getattr(self, name) for name in _NAMES}

    @classmethod
    def from_dict(cls, data: Any, where: str = "config", source: str = "") -> TrialConfig:
        """Build and validate; every problem is reported at once in one ConfigError, headed
        by ``source`` (a file's path) when given, each problem naming ``where.knob``.
        Missing knobs take their defaults (configs written by older versions have fewer)."""
        problems = validate_values(data, where)
        if problems:
            head = f"{source}: {where}" if source else where
            raise ConfigError(f"{head} is invalid:\n" + "\n".join(f"  - {p}" for p in problems))
        return cls(**data)

    def replace(self, **changes: Any) -> TrialConfig:
        return TrialConfig.from_dict({**self.to_dict(), **changes})

    def data_ranks(self) -> int:
        """How many ways the batch is split between ranks: every rank under DDP / FSDP, none
        under tensor or pipeline parallelism (each rank of a TP group sees the whole batch,
        a pipeline feeds it to its first stage), ``devices / tp_size`` FSDP groups on a 2-D mesh.

        Example:
            >>> TrialConfig(parallelism="fsdp_tp", devices=4, tp_size=2).data_ranks()
            2
        """
        if self.parallelism in ("ddp", "fsdp"):
            return self.devices
        if self.parallelism == "fsdp_tp":
            return max(1, self.devices // self.tp_size)
        return 1

    def key(self) -> str:
        """A canonical string: equal configs have equal keys (used to find duplicates)."""
        return json.dumps(self.to_dict(), sort_keys=True)

    def changed(self, base: TrialConfig | None = None, knobs: Iterable[str] | None = None) -> dict[str, Any]:
        """The knobs (of ``knobs``; default every one) whose value differs from ``base``
        (default: the default setup), with this configuration's values."""
        other = base if base is not None else _DEFAULT_SETUP
        names = knobs if knobs is not None else DOMAINS
        return {k: v for k in names if (v := getattr(self, k)) != getattr(other, k)}

    def describe(self) -> str:
        """A short one-line description: batch size and precision, then what differs
        from the plain setup.

        Example:
            >>> TrialConfig(parallelism="ddp", devices=2, pruning="l1_unstructured").describe()
            'bs=64 fp32 ddp x2 l1_unstructured:0.5'
        """
        parts = [f"bs={self.batch_size}", self.precision]
        folded = {"batch_size", "precision", "devices", "prune_amount", "compile_mode", "parallelism", "pruning"}
        if self.parallelism != "single":
            parts.append(f"{self.parallelism} x{self.devices}")
        if self.pruning != "none":
            amount = "" if self.pruning == "semi_structured_2_4" else f":{self.prune_amount:g}"
            parts.append(f"{self.pruning}{amount}")
        for key, value in self.changed().items():
            if key not in folded:
                parts.append(key if value is True else f"{key}={value}")
        if self.compile and self.compile_mode != "default":
            parts.append(f"compile_mode={self.compile_mode}")
        return " ".join(parts)


# Every knob's valid values, by TrialConfig field, in field order.
DOMAINS: dict[str, Domain] = {f.name: f.metadata["domain"] for f in fields(TrialConfig)}
_NAMES = tuple(DOMAINS)
_DEFAULT_SETUP = TrialConfig()


def validate_values(data: Any, where: str) -> list[str]:
    """Problems with a mapping of knob values (unknown keys, wrong types/values)."""
    if not isinstance(data, dict):
        return [f"{where}: expected a mapping of knob: value, found {type(data).__name__}"]
    problems = []
    for key, value in data.items():
        domain = DOMAINS.get(key)
        if domain is None:
            problems.append(f"{where}.{key}: unknown key ({unknown_knob_hint(key)})")
            continue
        error = domain.check(value)
        if error:
            problems.append(f"{where}.{key}: {error}")
    return problems


def unknown_knob_hint(key: Any, known: Iterable[str] = DOMAINS) -> str:
    """What to say of a name that is none of ``known`` (every knob by default): the closest
    one, if one is close, and all of them."""
    names = list(known)
    close = difflib.get_close_matches(str(key), names, n=1)
    guess = f"did you mean {close[0]!r}? " if close else ""
    return f"{guess}known: {', '.join(names)}"
