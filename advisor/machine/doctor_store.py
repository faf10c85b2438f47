"""``advisor doctor``'s verdicts, kept per hardware fingerprint: which knob options ran and
which failed on this machine, so that ``advisor tune`` drops the failed ones.

One small JSON file per fingerprint (``advisor.machine.hardware.fingerprint``: CPU, GPUs,
driver, torch, torchao, CUDA, Python), named by a hash of it, in ``$ADVISOR_HOME/doctor/``
or else ``$XDG_CACHE_HOME/advisor/doctor/`` (``~/.cache/advisor/doctor/``): a new torch, a
new driver or another machine starts from no verdicts. The file is written atomically
(a private temporary file beside it, then renamed) with mode 0600 in a 0700 folder, and
read as data (JSON), never executed. A verdict on the built-in tiny model holds for every
workload on this machine; one on a user's model.py only for that file's exact content
(its sha256). A file that cannot be read or parsed is treated as no verdicts.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

HOME_ENV = "ADVISOR_HOME"
FORMAT = 1
BUILTIN = "built-in"  # the model of a verdict on the doctor's own tiny model
FAILS = "fails"  # the status of an option that failed (dropped from advisor tune)
MAX_MODELS = 20  # user models whose verdicts are kept (the most recent ones)
DROP_PREFIX = "failed advisor doctor on this machine"


@dataclass(frozen=True)
class Verdict:
    """How one knob option did in ``advisor doctor``, on one model.

    ``status``: works, fails, timeout (it ran longer than the doctor's limit: not a
    failure), or not judged (its failure is its context's: see ``note``)."""

    knob: str
    value: Any
    status: str
    model: str = BUILTIN  # BUILTIN, or the model.py's path when it was run
    model_sha256: str | None = None  # None for the built-in model
    workload: str = "train"  # what it ran as
    error: str = ""  # the first line of the error
    failure_class: str | None = None
    throughput_ratio: float | None = None  # to the reference (fp32, or the model's BASELINE)
    memory_ratio: float | None = None
    run: dict[str, Any] = field(default_factory=dict)  # the knobs its run changed from the reference
    note: str = ""
    measured_at: float = 0.0  # time.time()

    @property
    def key(self) -> tuple[str, str, str]:
        return self.model_sha256 or BUILTIN, self.knob, json.dumps(self.value)

    @property
    def drop_reason(self) -> str:
        """What ``advisor tune`` says when it drops this option."""
        where = "" if self.model_sha256 is None else f"{Path(self.model).name}: "
        return f"{DROP_PREFIX} ({where}{self.error or self.failure_class or 'failed'})"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Verdict:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def store_dir() -> Path:
    """Where the verdict files live: ``$ADVISOR_HOME/doctor``, else the user's cache."""
    home = os.environ.get(HOME_ENV, "").strip()
    if home:
        return Path(home).expanduser() / "doctor"
    cache = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(cache).expanduser() if cache else Path.home() / ".cache") / "advisor" / "doctor"


def fingerprint_hash(fingerprint: dict[str, Any]) -> str:
    """A short, stable name for a hardware fingerprint."""
    return hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()[:16]


def store_path(fingerprint: dict[str, Any]) -> Path:
    return store_dir() / f"{fingerprint_hash(fingerprint)}.json"


def read_verdicts(fingerprint: dict[str, Any]) -> list[Verdict]:
    """Every verdict stored for this fingerprint (none when there is no readable file, or
    the file is for another fingerprint)."""
    try:
        data = json.loads(store_path(fingerprint).read_text())
        if data.get("format") != FORMAT or data.get("fingerprint") != fingerprint:
            return []
        return [Verdict.from_dict(v) for v in data.get("verdicts", []) if isinstance(v, dict)]
    except (OSError, ValueError, TypeError, AttributeError):
        return []


def failures(fingerprint: dict[str, Any], workload_sha256: str | None = None) -> list[Verdict]:
    """The options that failed here: on the built-in model (every workload), and on the
    model.py whose content hash is ``workload_sha256``; the built-in model's first."""
    found = [v for v in read_verdicts(fingerprint)
             if v.status == FAILS and (v.model_sha256 is None or v.model_sha256 == workload_sha256)]
    return sorted(found, key=lambda v: v.model_sha256 is not None)


def save_verdicts(fingerprint: dict[str, Any], verdicts: list[Verdict]) -> Path:
    """Store ``verdicts``, replacing those of the same model and option and keeping the
    rest (the verdicts of the most recent ``MAX_MODELS`` user models). Returns the path."""
    path = store_path(fingerprint)
    new = {v.key: v for v in verdicts}
    kept = [v for v in read_verdicts(fingerprint) if v.key not in new] + list(new.values())
    latest: dict[str, float] = {}
    for v in kept:
        if v.model_sha256 is not None:
            latest[v.model_sha256] = max(latest.get(v.model_sha256, 0.0), v.measured_at)
    recent = set(sorted(latest, key=latest.__getitem__, reverse=True)[:MAX_MODELS])
    kept = [v for v in kept if v.model_sha256 is None or v.model_sha256 in recent]
    document = {"format": FORMAT, "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "fingerprint": fingerprint,
                "verdicts": [v.to_dict() for v in kept]}
    _write_private(path, json.dumps(document, indent=1) + "\n")
    return path


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, readable by this user only."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # created with mode 0600
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
