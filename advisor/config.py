"""TrialConfig: one point of the search space, and the export file format around it.

An exported file is data only (YAML or JSON, read with ``yaml.safe_load``)::

    advisor_config: 1
    config: {batch_size: 128, precision: bf16, compile: false, ...}
    source: {study: digits_cnn-default, trial: 7, workload: /path/model.py, ...}
    measured: {throughput: 5123.0, peak_memory: 41943040, accuracy: 0.97, ...}

Only ``config`` is needed to apply it; ``source`` and ``measured`` say where it came from.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from advisor.errors import ConfigError

FORMAT_VERSION = 1


def _check_batch_size(value: Any) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return None
    return f"expected a positive integer, found {value!r}"


@dataclass(frozen=True)
class TrialConfig:
    """One configuration of the knobs. Defaults are the plain fp32 eager setup on one device.

    ``batch_size`` is the global batch of one optimizer step: with ``devices`` ranks and
    ``grad_accumulation`` micro-steps each rank runs ``batch_size / (devices *
    grad_accumulation)`` samples per forward pass. Configs stored by older versions (fewer
    fields) load with the defaults for the new fields.

    Example:
        >>> TrialConfig(batch_size=128, precision="bf16").to_dict()["precision"]
        'bf16'
    """

    batch_size: int = 64
    precision: str = "fp32"
    threads: int | None = None
    channels_last: bool = False
    compile: bool = False
    compile_mode: str = "default"
    parallelism: str = "single"
    devices: int = 1
    comm_hook: str = "none"
    bucket_mb: int = 25
    pruning: str = "none"
    prune_amount: float = 0.5
    quantization: str = "none"
    activation_checkpointing: bool = False
    grad_accumulation: int = 1
    num_workers: int = 0
    pin_memory: bool = False

    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any, where: str = "config") -> TrialConfig:
        """Build and validate; every problem is reported at once in one ConfigError."""
        problems = validate_values(data, where)
        if problems:
            raise ConfigError(f"{where} is invalid:\n" + "\n".join(f"  - {p}" for p in problems))
        return cls(**data)

    def replace(self, **changes: Any) -> TrialConfig:
        return TrialConfig.from_dict({**self.to_dict(), **changes})

    def key(self) -> str:
        """A canonical string: equal configs have equal keys (used to find duplicates)."""
        return json.dumps(self.to_dict(), sort_keys=True)


def validate_values(data: Any, where: str) -> list[str]:
    """Problems with a mapping of knob values (unknown keys, wrong types/values)."""
    from advisor.techniques import TECHNIQUES

    if not isinstance(data, dict):
        return [f"{where}: expected a mapping of knob: value, found {type(data).__name__}"]
    problems = []
    known = TrialConfig.keys()
    for key, value in data.items():
        if key not in known:
            problems.append(f"{where}.{key}: unknown key (known: {', '.join(known)})")
            continue
        error = _check_batch_size(value) if key == "batch_size" else TECHNIQUES[key].check(value)
        if error:
            problems.append(f"{where}.{key}: {error}")
    return problems


def dump_export(document: dict[str, Any], path: str | Path | None, fmt: str = "yaml") -> str:
    """Serialise an export document; write it to ``path`` atomically when given."""
    if fmt == "json":
        text = json.dumps(document, indent=2) + "\n"
    elif fmt == "python":
        from advisor.export_python import python_script

        text = python_script(document, Path(path).name if path is not None else "this_file.py")
    elif fmt == "yaml":
        text = yaml.safe_dump(document, sort_keys=False)
    else:
        raise ConfigError(f"unknown export format {fmt!r} (expected yaml, json or python)")
    if path is not None:
        path = Path(path)
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            tmp.write_text(text)
            tmp.replace(path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None
    return text


def load_config(path: str | Path) -> TrialConfig:
    """Read an exported config file (YAML or JSON) and return its validated TrialConfig.

    Accepts the full export document or a bare mapping of knob values.

    Example:
        >>> cfg = advisor.load_config("best.yaml")  # doctest: +SKIP
        >>> prepared = advisor.apply(model, cfg)    # doctest: +SKIP
    """
    return read_export(path)[0]


def read_export(path: str | Path) -> tuple[TrialConfig, dict[str, Any]]:
    """The validated config of an exported file and the whole document (``source``,
    ``measured``, ``hardware`` when it is a full export; just ``config`` otherwise)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config file ({exc.strerror or exc})") from None
    try:
        data = yaml.safe_load(text)  # JSON is YAML too
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML or JSON: {exc}") from None
    document: dict[str, Any] = {"config": data}
    if isinstance(data, dict) and "advisor_config" in data:
        version = data.get("advisor_config")
        if version != FORMAT_VERSION:
            raise ConfigError(f"{path}: advisor_config is {version!r}; this advisor reads version {FORMAT_VERSION}")
        document, data = data, data.get("config")
    return TrialConfig.from_dict(data, where=f"{path}: config"), document
