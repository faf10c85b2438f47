"""The exported configuration file: data only (YAML or JSON, read with ``yaml.safe_load``)::

    advisor_config: 2
    config: {batch_size: 128, precision: bf16, compile: false, ...}
    source: {study: digits_cnn-default, trial: 7, workload: /path/model.py, ...}
    measured: {throughput: 5123.0, peak_memory_bytes: 41943040, score: 0.97, metric: {...}, ...}
    hardware: {cpu_model: ..., gpus: [...], torch_version: ...}

Only ``config`` is needed to apply it; ``source``, ``measured`` and ``hardware`` say where
it came from. A bare mapping of knob values is accepted too. Version 1 (before 2026-11-27)
named the metric's keys after accuracy (``measured.accuracy``, ``vs_baseline.accuracy_delta``,
...); they are read under version 2's names (``V1_NAMES``).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import yaml

from advisor.core.config import DOMAINS, TrialConfig
from advisor.core.errors import ConfigError
from advisor.core.results import WORKLOADS

FORMAT_VERSION = 2  # 2: measured.score, vs_baseline.metric_* (were accuracy*: any metric, any direction)
READS = (1, 2)  # the versions read_export accepts
V1_NAMES = {"accuracy": "score", "accuracy_delta": "metric_delta", "accuracy_noise_epsilon": "metric_noise_epsilon",
            "accuracy_within_noise": "metric_within_noise"}  # version 1's keys -> version 2's (_current)

def serialise(document: dict[str, Any], fmt: str = "yaml") -> str:
    """An export document as YAML or JSON text."""
    if fmt == "json":
        return json.dumps(document, indent=2) + "\n"
    if fmt == "yaml":
        return yaml.safe_dump(document, sort_keys=False)
    raise ConfigError(f"unknown export format {fmt!r} (expected yaml or json)")


def write_atomically(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` under a temporary name, then rename: a reader never sees
    half a file, and a failure leaves nothing behind. A path that is not a regular file
    (``/dev/null``, ``/dev/stdout``, a named pipe) is written to as it is: renaming over it
    would replace the device itself (as root, ``-o /dev/null`` did)."""
    path = Path(path)
    if path.exists() and not path.is_file() and not path.is_dir():
        try:
            with open(path, "w") as fh:
                fh.write(text)
        except OSError as exc:
            raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None
        return path
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text)
        tmp.replace(path)
    except OSError as exc:
        with contextlib.suppress(OSError):  # a read-only folder refuses even to unlink what is not there
            tmp.unlink(missing_ok=True)
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path


def config_sha256(config: TrialConfig, knobs: Any = None) -> str:
    """The sha256 of a configuration's knob values (as an export's ``source.config_sha256``
    records it; of ``knobs`` alone when given): a config edited by hand after the export no
    longer matches it."""
    import hashlib

    values = config.to_dict()
    if knobs is not None:
        values = {k: v for k, v in values.items() if k in knobs}
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()


def edited_since_export(config: TrialConfig, document: dict[str, Any]) -> list[str] | None:
    """None when ``config`` is what the export ``document`` measured (or it records no
    hash); else the knobs its file lacks (maybe none: a value was changed). The hash is
    over the knobs the file lists, so an export written before later knobs existed still
    matches; one whose ``batch_size`` line was deleted does not."""
    source, written = document.get("source"), document.get("config")
    stored = source.get("config_sha256") if isinstance(source, dict) else None
    if not stored or not isinstance(written, dict) or stored == config_sha256(config, written):
        return None
    return [k for k in DOMAINS if k not in written and k in ALWAYS_WRITTEN]


# the knobs every export has listed since the first: a full export without one was edited
ALWAYS_WRITTEN = ("batch_size", "precision", "channels_last", "compile")
MEASURED_AS = "_advisor_measured_as"  # a loaded export's workload kind, on its TrialConfig (not a field)
MEASURED_MODEL = "_advisor_measured_parameters"  # ... and its model's parameter count (not a field either)
MEASURED_DTYPE = "_advisor_measured_weights_dtype"  # ... and its weights' dtype as model() built them ("float32")


def load_config(path: str | Path) -> TrialConfig:
    """Read an exported config file (YAML or JSON) and return its validated TrialConfig.

    Accepts the full export document or a bare mapping of knob values. A full export's
    configuration remembers what it was measured for (its ``source.workload_kind``):
    ``advisor.apply()`` prepares the model for that, and refuses the other
    (``measured_workload``).

    Raises:
        ConfigError: the file cannot be read, is not YAML/JSON, has another format
            version, or holds invalid knob values (all listed).

    Example:
        >>> cfg = advisor.load_config("best.yaml")  # doctest: +SKIP
        >>> prepared = advisor.apply(model, cfg)    # doctest: +SKIP
    """
    config, document = read_export(path)
    source = document.get("source")
    missing = edited_since_export(config, document)
    if missing is not None:  # apply() would build what nobody measured: say so (the figures are another's)
        import warnings

        lacks = f": it has no {', '.join(missing)} (the default is used)" if missing else ""
        trial = source.get("trial") if isinstance(source, dict) else None
        warnings.warn(f"{path}: its config is not the one trial {trial} measured (edited after the export{lacks}); "
                      "advisor.apply() builds it as it reads now, and the figures under `measured` are of the "
                      "configuration as exported", UserWarning, stacklevel=2)
    kind = source.get("workload_kind") if isinstance(source, dict) else None
    if kind in WORKLOADS:
        object.__setattr__(config, MEASURED_AS, kind)  # not a field: equality, keys and hashes are the knobs' alone
    parameters = source.get("model_parameters") if isinstance(source, dict) else None
    if isinstance(parameters, int) and not isinstance(parameters, bool):
        object.__setattr__(config, MEASURED_MODEL, (parameters, source.get("workload")))
    dtype = source.get("model_weights_dtype") if isinstance(source, dict) else None
    if isinstance(dtype, str):
        object.__setattr__(config, MEASURED_DTYPE, dtype)
    return config


def measured_weights_dtype(config: TrialConfig) -> str | None:
    """The dtype of the weights model() built in the study ``config`` was exported from
    ("float32", "bfloat16"), when ``load_config`` read an export that records it."""
    return getattr(config, MEASURED_DTYPE, None)


def measured_workload(config: TrialConfig) -> str | None:
    """What ``config`` was measured for ("train" or "inference"), when ``load_config`` read
    it from a full export; None for any other configuration."""
    return getattr(config, MEASURED_AS, None)


def measured_model(config: TrialConfig) -> tuple[int, str | None] | None:
    """(parameter count, model.py's path) of the model ``config`` was measured on, when
    ``load_config`` read it from an export that records them; None otherwise."""
    return getattr(config, MEASURED_MODEL, None)


def read_export(path: str | Path) -> tuple[TrialConfig, dict[str, Any]]:
    """The validated config of an exported file and the whole document (``source``,
    ``measured``, ``hardware`` when it is a full export; just ``config`` otherwise)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config file ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not a text file (byte {exc.start} is not UTF-8): expected the YAML or JSON "
                          "that advisor export writes") from None
    try:
        data = yaml.safe_load(text)  # JSON is YAML too
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML or JSON: {exc}") from None
    document: dict[str, Any] = {"config": data}
    if isinstance(data, dict) and "advisor_config" in data:
        version = data.get("advisor_config")
        if version not in READS:
            raise ConfigError(f"{path}: advisor_config is {version!r}; this advisor reads versions "
                              f"{', '.join(map(str, READS))}")
        if "config" not in data:
            raise ConfigError(f"{path}: an export (advisor_config {version}) with no config key: found "
                              f"{', '.join(map(str, data))}; expected config: {{knob: value, ...}}")
        document, data = _current(data), data.get("config")
    elif isinstance(data, dict) and isinstance(data.get("config"), dict) and not set(data) & set(DOMAINS):
        # an export's shape without its version line (trimmed, or by hand)
        document, data = _current(data), data["config"]
    return TrialConfig.from_dict(data, where="config", source=str(path)), document


def _current(document: dict[str, Any]) -> dict[str, Any]:
    """A version-1 document as version 2 reads it: the metric's keys that said "accuracy"
    (``measured.accuracy``, the score; ``vs_baseline``'s delta and noise) under their
    version-2 names."""
    measured = document.get("measured")
    # a document without its version line is read as version 1 (version 2's keys pass unchanged)
    if document.get("advisor_config", 1) != 1 or not isinstance(measured, dict):
        return document
    measured = {V1_NAMES.get(k, k): v for k, v in measured.items()}
    if isinstance(measured.get("vs_baseline"), dict):
        measured["vs_baseline"] = {V1_NAMES.get(k, k): v for k, v in measured["vs_baseline"].items()}
    return {**document, "measured": measured}
