"""Warm trial processes: every trial still runs in a process of its own, but that process
is forked from a fork server which has already imported torch, advisor and the libraries
model.py imports, so a trial does not pay for an interpreter start and ~2-3 s of imports.

The fork server (Python's ``multiprocessing`` "forkserver") belongs to the Ray worker that
runs the trial task; the worker is reused from trial to trial, the fork server with it.
Neither ever runs a tensor operation or touches CUDA: the trial process starts from
imported modules only, with the Ray task's environment (``CUDA_VISIBLE_DEVICES``,
``OMP_NUM_THREADS``) and working directory, and it dies with the fork server
(``PR_SET_PDEATHSIG``), which exits when the Ray worker does (a cancelled or timed-out
trial is ended by killing the worker, as before).

``ADVISOR_COLD_TRIALS=1`` in the environment of ``advisor tune`` turns this off: each trial
then runs in a fresh Ray worker (``max_calls=1``), at the cost of the start-up.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import os
import signal
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# Imported by the fork server whatever the workload imports (torch._dynamo: every torch
# optimizer imports it on construction, ~1.5 s).
ALWAYS = ("torch", "torch._dynamo", "advisor.trial", "advisor.steps", "advisor.apply", "advisor.measure", "advisor.workload",
          "advisor.techniques")
PRELOAD_ENV = "ADVISOR_PRELOAD"  # comma-separated module names, read by advisor._preload


def cold() -> bool:
    """True when trials should start from a fresh interpreter (``ADVISOR_COLD_TRIALS=1``)."""
    return os.environ.get("ADVISOR_COLD_TRIALS", "").strip().lower() in ("1", "true", "yes")


def workload_imports(source: str) -> list[str]:
    """The absolute modules model.py imports at its top level, in order.

    Example:
        >>> workload_imports("import torch\\nfrom sklearn.datasets import load_digits\\nfrom . import x")
        ['torch', 'sklearn.datasets']
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return list(dict.fromkeys(names))


def preload_list(source: str) -> list[str]:
    """What the fork server imports: ``ALWAYS`` and model.py's installed libraries.

    Only modules that live in the interpreter's standard library or site-packages are
    preloaded; anything else (a module beside model.py, an editable install of your own
    package) may be edited between studies, and a long-lived fork server would keep the
    old version.
    """
    keep = []
    for name in workload_imports(source):
        try:
            spec = importlib.util.find_spec(name.split(".")[0])
        except (ImportError, ValueError):
            continue
        if spec is None:
            continue
        where = spec.origin if spec.origin not in (None, "built-in", "frozen") else None
        if where is None and spec.submodule_search_locations:
            where = next(iter(spec.submodule_search_locations), None)
        if where is None or any(Path(where).resolve().is_relative_to(d) for d in _installed_paths()):
            keep.append(name)
    return list(dict.fromkeys([*ALWAYS, *keep]))


def _installed_paths() -> list[Path]:
    import site
    import sysconfig

    paths = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths.update(site.getsitepackages())
    paths.add(site.getusersitepackages())
    return [Path(p).resolve() for p in paths if p]


_CONTEXT: Any = None
_FORKED = False  # True in a trial process started by run_forked
_SPAWN_ONLY = False  # the fork server turned out unusable for CUDA: spawn instead
CUDA_POISONED = "cuda_initialised_before_fork"
# A fake for the tests, which have no GPU: the trial process acts as if CUDA had been
# initialised in the fork server.
PRETEND_POISONED_ENV = "ADVISOR_TEST_PRETEND_CUDA_FORK_POISONED"


def forked_trial() -> bool:
    """True in a trial process started by ``run_forked``: single-threaded, torch imported,
    no tensor operation run yet, so it may itself fork (the ranks of a DDP trial)."""
    return _FORKED


def _context(payload: dict[str, Any]) -> Any:
    """The fork-server context, started on first use with this payload's preload list.
    (A fork server already running keeps its first list: later workloads' libraries are
    then imported by each trial, which is slower but still correct.)"""
    global _CONTEXT
    if _CONTEXT is None:
        import multiprocessing

        os.environ[PRELOAD_ENV] = ",".join(preload_list(payload["workload_source"]))
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["advisor._preload"])
        _CONTEXT = ctx
    return _CONTEXT


def run_forked(payload: dict[str, Any]) -> dict[str, Any]:
    """Run ``advisor.trial.run_trial(payload)`` in a process forked from the warm fork
    server and return its result; a process that dies without answering is a ``crash``.

    If CUDA turns out to have been initialised in the fork server (a library model.py
    imports did it at import), CUDA cannot work in a forked process: this trial and every
    later one of this worker then run in a spawned process (a fresh interpreter) instead.
    """
    global _SPAWN_ONLY
    if not _SPAWN_ONLY:
        result = _run_in(_context(payload), payload)
        if not result.get(CUDA_POISONED):
            return result
        _SPAWN_ONLY = True
    import multiprocessing

    return _run_in(multiprocessing.get_context("spawn"), payload)


def _run_in(ctx: Any, payload: dict[str, Any]) -> dict[str, Any]:
    from advisor.trial import TrialResult

    receive, send = ctx.Pipe(duplex=False)
    submitted = time.perf_counter()
    forked = ctx.get_start_method() != "spawn"
    process = ctx.Process(target=_child, args=(payload, dict(os.environ), os.getcwd(), submitted, send, forked),
                          name="advisor-trial", daemon=False)
    with _bare_main():
        process.start()
    send.close()
    try:
        result: dict[str, Any] | None = receive.recv()
    except EOFError:
        result = None
    finally:
        receive.close()
    process.join()
    if result is None:
        return TrialResult.failed("crash", f"the trial process died ({describe_exit(process.exitcode)})").to_dict()
    return result


@contextlib.contextmanager
def _bare_main() -> Iterator[None]:
    """Start a process without it re-importing ``__main__``: multiprocessing re-runs the
    parent's main script in every child, which in a Ray worker is Ray's worker script
    (~0.4 s of imports) and, in a user's script, whatever it does at top level."""
    real = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = real


def describe_exit(code: int | None) -> str:
    """'killed by SIGKILL' for a negative exit code, 'exit status N' otherwise."""
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = ": the kernel's out-of-memory killer, or a kill from outside" if name == "SIGKILL" else ""
        return f"killed by {name}{hint}"
    return f"exit status {code}"


def _child(payload: dict[str, Any], environ: dict[str, str], cwd: str, submitted: float, conn: Any,
           forked: bool) -> None:
    """The trial process: made to die with the fork server, given the task's environment."""
    global _FORKED
    die_with_parent()
    _FORKED = forked  # a spawned fallback (CUDA) must not fork ranks from itself
    adopt_environment(environ)
    os.chdir(cwd)
    if forked and payload["settings"].get("device") == "cuda" and _cuda_poisoned():
        conn.send({CUDA_POISONED: True})
        conn.close()
        return
    from advisor.trial import run_trial

    result = run_trial(payload)
    result.setdefault("phase_s", {})["process_start"] = max(0.0, time.perf_counter() - submitted
                                                              - result["phase_s"].get("total", 0.0))
    conn.send(result)
    conn.close()


def threads_from_env() -> None:
    """Take this process's OMP_NUM_THREADS: torch fixed its thread count from the value it
    saw when the fork server imported it, and a forked process inherits that count."""
    value = os.environ.get("OMP_NUM_THREADS", "")
    if value.isdigit() and int(value) > 0:
        import torch

        torch.set_num_threads(int(value))


def _cuda_poisoned() -> bool:
    """True when this forked process cannot use CUDA: it was initialised before the fork."""
    if os.environ.get(PRETEND_POISONED_ENV) == "1":
        return True
    import torch

    return bool(torch.cuda._is_in_bad_fork())


def die_with_parent(parent: int | None = None) -> None:
    """Linux: SIGKILL this process when its parent exits (PR_SET_PDEATHSIG), so a killed
    Ray worker, fork server or trial supervisor leaves nothing running. If the parent
    (``parent``, or any when None) already went before this call, exit now."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() == 1 or (parent is not None and os.getppid() != parent):
        os._exit(1)


def adopt_environment(environ: dict[str, str]) -> None:
    """In a forked process: take ``environ`` as this process's environment, and the
    thread count it names (torch fixed its count at import, in the fork server)."""
    os.environ.clear()
    os.environ.update(environ)
    threads_from_env()
