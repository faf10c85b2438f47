"""What W&B wrote for offline runs, read back from their ``.wandb`` files (no reader is
public in wandb 0.31: the file is a LevelDB-style log of ``wandb_internal_pb2.Record``
protobufs, in 32 KiB blocks, after a 7-byte header ``:W&B``, magic, version)."""

from __future__ import annotations

import json
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

BLOCK, HEADER = 32768, 7
FULL, LAST = 1, 4


def records(path: Path) -> list[Any]:
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    found, pos, chunk = [], HEADER, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # the block's tail is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + HEADER])
        if (length == 0 and kind == 0) or pos + HEADER + length > len(data):
            break  # the end, or a record still being written
        chunk += data[pos + HEADER:pos + HEADER + length]
        pos += HEADER + length
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunk)
            found.append(record)
            chunk = b""
    return found


def _key(item: Any) -> str:
    return "/".join(item.nested_key) if item.nested_key else item.key


@dataclass
class OfflineRun:
    name: str
    group: str
    job_type: str
    project: str
    tags: list[str]
    config: dict[str, Any]
    summary: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    exit_code: int | None = None


def offline_runs(wandb_dir: Path, wait_s: float = 60.0) -> list[OfflineRun]:
    """Every offline run under ``wandb_dir`` (the folder holding offline-run-*), once each
    file is complete: W&B's service writes them on its own, after ``finish()`` returns."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            runs = [_read(path) for path in sorted(wandb_dir.glob("offline-run-*/run-*.wandb"))]
            if all(run.exit_code is not None for run in runs) or time.monotonic() > deadline:
                return runs
        except AssertionError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def _read(path: Path) -> OfflineRun:
    run: OfflineRun | None = None
    for r in records(path):
        kind = r.WhichOneof("record_type")
        if kind == "run":
            config = {u.key: json.loads(u.value_json) for u in r.run.config.update if u.key != "_wandb"}
            run = OfflineRun(r.run.display_name, r.run.run_group, r.run.job_type, r.run.project,
                             list(r.run.tags), config)
        elif run is not None and kind == "config":
            run.config |= {u.key: json.loads(u.value_json) for u in r.config.update if u.key != "_wandb"}
        elif run is not None and kind == "summary":
            run.summary |= {_key(u): json.loads(u.value_json) for u in r.summary.update}
        elif run is not None and kind == "history":
            run.history.append({_key(i): json.loads(i.value_json) for i in r.history.item})
        elif run is not None and kind == "exit":
            run.exit_code = r.exit.exit_code
    assert run is not None, f"{path} holds no run record"
    return run


@pytest.fixture
def wandb_offline(tmp_path: Path, monkeypatch: Any) -> Path:
    """W&B offline, writing under a temp dir; no project or entity from the environment.
    The offline runs' folder (for ``offline_runs``)."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wb"))
    for variable in ("WANDB_PROJECT", "WANDB_ENTITY"):
        monkeypatch.delenv(variable, raising=False)
    return tmp_path / "wb" / "wandb"
