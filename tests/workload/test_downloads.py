"""Downloads (issue 30): model.py may fetch weights and data. The preflight calls model() and
datasets() once in the driver, so that the caches fill there, each call bounded in time;
trials then start with the libraries' offline switches set and read the caches.

The model hub is a stand-in: an ``http.server`` on 127.0.0.1 that counts the requests it
answers (nothing outside this machine can be reached here). The model.py written by each
test fetches from it with urllib into a cache directory when a file is missing, as
``from_pretrained`` or ``download=True`` would. Its URL and cache are written into the file
rather than passed by environment variable: the trials' Ray workers belong to a Ray started
once per test session, before the test could set a variable for them.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from advisor.core.errors import WorkloadError
from advisor.core.stored import read_study
from advisor.study.storage import stores as st
from advisor.workload.contract import load_workload
from advisor.workload.downloads import OFFLINE_SWITCHES, offline_env
from advisor.workload.preflight import preflight

from conftest import exit_status, write_model


class Hub:
    """The stand-in hub: serves ``files`` (name -> bytes) and counts each request by path;
    ``missing`` names answered 404, ``hanging`` names never answered (until stopped)."""

    def __init__(self, files: dict[str, bytes], missing: tuple[str, ...] = (), hanging: tuple[str, ...] = ()):
        self.requests: Counter[str] = Counter()
        self.release = threading.Event()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                name = self.path.lstrip("/")
                hub.requests[name] += 1
                if name in hanging:
                    hub.release.wait(60)
                    return
                if name in missing or name not in files:
                    self.send_error(404, f"{name} is not on this hub")
                    return
                body = files[name]
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Hub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def hub_files() -> dict[str, bytes]:
    """A model's weights and a dataset, as torch.save writes them."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    weights = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).state_dict()
    x = torch.randn(640, 16)
    data = {"x": x, "y": x[:, :4].argmax(dim=1)}
    files = {}
    for name, obj in (("weights.pt", weights), ("data.pt", data)):
        buffer = io.BytesIO()
        torch.save(obj, buffer)
        files[name] = buffer.getvalue()
    return files


MODEL = '''import os
import urllib.request
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import TensorDataset

HUB = "{url}"
CACHE = Path("{cache}")
BASELINE = {{"batch_size": 32}}


def fetch(name):
    """The file from the cache, downloaded into it first when missing; each call noted with
    the offline switch it ran under."""
    CACHE.mkdir(exist_ok=True)
    with open(CACHE / "calls.log", "a") as log:
        log.write(f"{{name}} {{os.environ.get('HF_HUB_OFFLINE')}}\\n")
    path = CACHE / name
    if not path.exists():
        with urllib.request.urlopen(f"{{HUB}}/{{name}}", timeout=60) as answer:
            body = answer.read()
        part = path.with_suffix(".part")
        part.write_bytes(body)
        part.replace(path)
    return torch.load(path)


def model():
    net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    net.load_state_dict(fetch("weights.pt"))
    return net


def datasets():
    data = fetch("data.pt")
    x, y = data["x"], data["y"]
    return TensorDataset(x[:512], y[:512]), TensorDataset(x[512:], y[512:])
'''


def model_file(tmp_path: Path, hub: Hub) -> tuple[Path, Path]:
    cache = tmp_path / "cache"
    return write_model(tmp_path, MODEL.format(url=hub.url, cache=cache)), cache


@pytest.mark.ray
def test_a_study_downloads_once_in_the_preflight_and_trials_run_offline(ray_session, workdir, monkeypatch):
    for name in OFFLINE_SWITCHES:
        monkeypatch.delenv(name, raising=False)
    with Hub(hub_files()) as hub:
        path, cache = model_file(workdir, hub)
        assert exit_status(["tune", str(path), "--trials", "3", "--space", "quick", "--train-samples", "512",
                            "--no-tui"]) == 0
        assert hub.requests == {"weights.pt": 1, "data.pt": 1}
    study = read_study(st.load(st.open_storage("sqlite:///advisor.db"), "model-quick"))
    failed = [(r.number, r.failure_class, r.failure_message) for r in study.records
              if r.state == "failed" and r.failure_class in ("error", "crash")]
    assert not failed, failed
    assert len([r for r in study.records if r.state in ("complete", "probed")]) >= 2
    calls = (cache / "calls.log").read_text().split("\n")
    # the preflight (in the driver, online) fetched; every trial's model() and datasets() ran offline
    assert calls[:2] == ["weights.pt None", "data.pt None"]
    trial_calls = [c for c in calls[2:] if c]
    assert len(trial_calls) >= 4 and all(c.endswith(" 1") for c in trial_calls), trial_calls


def test_a_download_that_fails_exits_2_in_the_users_frames_with_nothing_written(workdir):
    with Hub(hub_files(), missing=("weights.pt",)) as hub:
        path, cache = model_file(workdir, hub)
        assert exit_status(["tune", str(path), "--trials", "2", "--no-tui"]) == 2
        assert hub.requests == {"weights.pt": 1}
        assert not (workdir / "advisor.db").exists()
        with pytest.raises(WorkloadError) as info:
            preflight(load_workload(path))
    text = str(info.value)
    assert f"{path}: model() raised HTTPError: HTTP Error 404: weights.pt is not on this hub" in text
    assert f'File "{path}", line' in text and "urlopen(" in text
    assert "advisor/" not in text


def test_a_download_that_hangs_is_stopped_naming_the_function_and_line(workdir, capsys, monkeypatch):
    monkeypatch.setenv("ADVISOR_PREFLIGHT_TIMEOUT", "1")
    with Hub(hub_files(), hanging=("data.pt",)) as hub:
        path, _ = model_file(workdir, hub)
        assert exit_status(["tune", str(path), "--trials", "2", "--no-tui"]) == 2
        assert hub.requests == {"weights.pt": 1, "data.pt": 1}
    err = " ".join(capsys.readouterr().err.split())
    assert f"{path}: datasets() did not finish within 1 s (it was at {path}, line" in err
    assert "urllib.request.urlopen(" in err and "a download that hangs?" in err
    assert "$ADVISOR_PREFLIGHT_TIMEOUT" in err and not (workdir / "advisor.db").exists()
    monkeypatch.setenv("ADVISOR_PREFLIGHT_TIMEOUT", "0")
    assert exit_status(["tune", str(path), "--trials", "2", "--no-tui"]) == 2
    assert "$ADVISOR_PREFLIGHT_TIMEOUT is '0': expected a positive number of seconds" in capsys.readouterr().err


def test_the_offline_switches_are_the_ones_huggingface_hub_reads():
    """Set as trials get them, the installed huggingface_hub (which transformers asks) is
    offline; a switch the user set leaves all of them to the user. (datasets, which reads
    HF_DATASETS_OFFLINE, is not installed here.)"""
    assert offline_env({}) == dict.fromkeys(OFFLINE_SWITCHES, "1")
    assert offline_env({"HF_HUB_OFFLINE": "0"}) == {} and offline_env({"TRANSFORMERS_OFFLINE": "1"}) == {}
    pytest.importorskip("huggingface_hub")
    probe = "import huggingface_hub; print(huggingface_hub.is_offline_mode())"
    bare = {k: v for k, v in os.environ.items() if k not in OFFLINE_SWITCHES}
    for env, expected in ((bare, "False"), (bare | offline_env({}), "True"),
                          (bare | {"TRANSFORMERS_OFFLINE": "1"}, "True")):
        out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == expected, (env.keys() & set(OFFLINE_SWITCHES), out.stdout)


def test_trials_get_the_switches_only_where_the_preflight_filled_the_caches(monkeypatch):
    from types import SimpleNamespace

    from advisor.study.run.tuner import trial_env

    for name in OFFLINE_SWITCHES:
        monkeypatch.delenv(name, raising=False)

    def plan(**options: object) -> SimpleNamespace:  # a stand-in: trial_env reads these two options only
        return SimpleNamespace(options=SimpleNamespace(**({"skip_preflight": False, "ray_address": None} | options)))

    assert trial_env(plan()) == dict.fromkeys(OFFLINE_SWITCHES, "1")
    assert trial_env(plan(skip_preflight=True)) == {}
    assert trial_env(plan(ray_address="10.0.0.2:6379")) == {}
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert trial_env(plan()) == {}



class StandInHub:
    """A stand-in for the Hugging Face hub on 127.0.0.1, as much of it as huggingface_hub's
    ``from_pretrained`` path needs: HEAD and GET of ``/{repo}/resolve/{revision}/{file}``
    with the headers it reads (``X-Repo-Commit``, ``ETag``), 404 with ``X-Error-Code:
    EntryNotFound`` for a file the repository lacks, 404 for its ``/api/`` calls (which it
    tolerates). It serves the files save_pretrained wrote into ``folder`` as repository
    ``repo``, and counts each request by method and path."""

    def __init__(self, folder: Path, repo: str) -> None:
        import hashlib

        self.requests: Counter[str] = Counter()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, body: bool) -> None:
                path = self.path.split("?")[0]
                hub.requests[f"{self.command} {path}"] += 1
                prefix = f"/{repo}/resolve/main/"
                file = folder / path[len(prefix):] if path.startswith(prefix) else None
                if file is not None and file.is_file():
                    data = file.read_bytes()
                    self.send_response(200)
                    self.send_header("X-Repo-Commit", "0" * 40)
                    self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if body:
                        self.wfile.write(data)
                    return
                self.send_response(404)
                if file is not None:
                    self.send_header("X-Error-Code", "EntryNotFound")
                    self.send_header("X-Repo-Commit", "0" * 40)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self) -> None:  # noqa: N802
                self._answer(True)

            def do_HEAD(self) -> None:  # noqa: N802
                self._answer(False)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


PRETRAINED = '''import torch
from torch.utils.data import Dataset
from transformers import AutoModelForCausalLM

BASELINE = {{"batch_size": 16}}
LOSS = "output.loss"
METRIC = {{"name": "next-token accuracy"}}
CONTEXT = 16


class Windows(Dataset):
    def __init__(self, tokens, count, seed):
        g = torch.Generator().manual_seed(seed)
        self.tokens = tokens
        self.starts = torch.randint(0, len(tokens) - CONTEXT - 1, (count,), generator=g)

    def __len__(self):
        return len(self.starts)

    def __getitem__(self, i):
        s = int(self.starts[i])
        window = self.tokens[s:s + CONTEXT]
        return {{"input_ids": window, "labels": window}}, self.tokens[s + 1:s + CONTEXT + 1]


def datasets():
    tokens = torch.tensor(list(b"abcdefgh" * 200), dtype=torch.long) % 64
    return Windows(tokens[:1400], 256, 0), Windows(tokens[1400:], 64, 1)


def model():
    return AutoModelForCausalLM.from_pretrained("tiny/gpt2", cache_dir="{cache}")
'''


@pytest.mark.ray
@pytest.mark.timeout(600)
def test_from_pretrained_fetches_once_from_a_stand_in_hub_and_trials_read_the_cache(workdir):
    """transformers' own ``from_pretrained`` against the stand-in hub (HF_ENDPOINT), in
    `advisor tune` run as a user runs it, in a process of its own with its own Ray (the
    endpoint is read when huggingface_hub is imported, and trials inherit the driver's
    environment): each file is asked for once, in the preflight; the trials, offline, ask
    for nothing."""
    pytest.importorskip("transformers")
    from transformers import GPT2Config, GPT2LMHeadModel

    from conftest import end_private_ray, private_ray

    GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2, bos_token_id=0,
                               eos_token_id=0)).save_pretrained(workdir / "repo")
    hub = StandInHub(workdir / "repo", "tiny/gpt2")
    path = write_model(workdir, PRETRAINED.format(cache=workdir / "hf-cache"))
    state, env = private_ray("advh-", {k: v for k, v in os.environ.items() if k not in OFFLINE_SWITCHES})
    env |= {"HF_ENDPOINT": hub.url, "HF_HOME": str(workdir / "hf-home")}
    try:
        run = subprocess.run([sys.executable, "-m", "advisor", "tune", str(path), "--trials", "2", "--space", "quick",
                              "--train-samples", "256", "--no-tui"], cwd=workdir, env=env, capture_output=True,
                             text=True, timeout=500)
    finally:
        hub.close()
        end_private_ray(state)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    files = {k: n for k, n in hub.requests.items() if "/resolve/" in k}
    names = ("config.json", "model.safetensors", "generation_config.json")
    assert {k for k in files if k.startswith("GET ")} == {f"GET /tiny/gpt2/resolve/main/{name}" for name in names}
    assert set(files.values()) == {1}, files  # each file once (HEAD, then GET), however many trials ran
    study = read_study(st.load(st.open_storage(f"sqlite:///{workdir / 'advisor.db'}"), "model-quick"))
    assert len([r for r in study.records if r.state in ("complete", "probed")]) >= 2
