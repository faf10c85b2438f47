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

import contextlib
import importlib.util
import os
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from advisor.core.results import TrialPayload, TrialResult
from advisor.trial.output import redirect_into, trial_drain, with_output
from advisor.trial.process import (
    adopt_environment,
    describe_exit,
    die_with_parent,
    mark_forked,
    normal_priority,
    rebuild_thread_pool,
)
from advisor.workload.local_modules import imported_from, imported_names

# Imported by the fork server whatever the workload imports (torch._dynamo: every torch
# optimizer imports it on construction, ~1.5 s).
ALWAYS = ("torch", "torch._dynamo", "advisor.trial.entry", "advisor.trial.single", "advisor.trial.loop",
          "advisor.trial.ranks", "advisor.techniques.prepare", "advisor.machine.memory", "advisor.machine.timing",
          "advisor.workload.contract")
PRELOAD_ENV = "ADVISOR_PRELOAD"  # comma-separated module names, read by advisor.trial._preload
CUDA_POISONED = "cuda_initialised_before_fork"  # what a forked trial answers when it cannot use CUDA


def cold() -> bool:
    """True when trials should start from a fresh interpreter (``ADVISOR_COLD_TRIALS=1``)."""
    return os.environ.get("ADVISOR_COLD_TRIALS", "").strip().lower() in ("1", "true", "yes")


def workload_imports(source: str) -> list[str]:
    """The absolute modules model.py imports at its top level, in order.

    Example:
        >>> workload_imports("import torch\\nfrom sklearn.datasets import load_digits\\nfrom . import x")
        ['torch', 'sklearn.datasets']
    """
    return imported_names(source, anywhere=False)


def preload_list(source: str) -> list[str]:
    """What the fork server imports: ``ALWAYS`` and model.py's installed libraries, then
    the names model.py takes from them (``from transformers import GPT2LMHeadModel``) as
    ``"module:name"``.

    Only modules that live in the interpreter's standard library or site-packages are
    preloaded; anything else (a module beside model.py, an editable install of your own
    package) may be edited between studies, and a long-lived fork server would keep the
    old version. The names matter for libraries that import their parts lazily, on first
    use of a name (transformers: ``import transformers`` leaves GPT-2's modules, about 1.7 s
    here, to the first ``GPT2LMHeadModel``); standard-library names are left out.
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
    names = [f"{module}:{name}" for module, name in imported_from(source)
             if module in keep and module.split(".")[0] not in sys.stdlib_module_names]
    return list(dict.fromkeys([*ALWAYS, *keep, *names]))


def _installed_paths() -> list[Path]:
    import site
    import sysconfig

    paths = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths.update(site.getsitepackages())
    paths.add(site.getusersitepackages())
    return [Path(p).resolve() for p in paths if p]


_CONTEXT: Any = None
_PRELOADED: tuple[str, ...] = ()  # what the running fork server imported
_CHECKED: set[str] = set()  # the workloads (their sha256) already checked against it: their trials skip the check
_RETIRED: list[int] = []  # fork servers replaced by a wider one, not yet reaped
_SPAWN_ONLY = False  # the fork server turned out unusable for CUDA: spawn instead


def _context(payload: TrialPayload) -> Any:
    """The fork-server context; its server has imported this payload's preload list.

    A Ray worker outlives a study (a cluster shared by studies, ``advisor.tune()`` run again
    in one program, a test session): when a later workload imports a library the running
    server has not, the server is replaced, between two trials, by one that imports what
    both need. Otherwise every trial of that workload would import the library itself
    (scikit-learn: about a second a trial). A new server costs a few seconds once (torch is
    imported again), so standard-library modules (milliseconds each) alone do not start one.
    """
    global _CONTEXT, _PRELOADED
    workload = payload.workload_sha256 or payload.workload_source
    if _CONTEXT is not None and workload in _CHECKED:
        return _CONTEXT
    if _RETIRED:
        _reap()
    wanted = [*preload_list(payload.workload_source), *payload.preload]
    missing = [name for name in dict.fromkeys(wanted) if name not in _PRELOADED]
    # a library not imported yet is worth a new server; a name from one already imported is
    # not (most such names are plain attributes: torch's nn), so it is resolved by the trial
    worth_a_server = any(":" not in name and name.split(".")[0] not in sys.stdlib_module_names for name in missing)
    # a server that cannot be replaced (this Python's multiprocessing is not as expected) stays:
    # each trial then imports the rest
    if _CONTEXT is None or (worth_a_server and _retire_server()):
        import multiprocessing

        _PRELOADED = (*_PRELOADED, *missing)
        os.environ[PRELOAD_ENV] = ",".join(_PRELOADED)
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["advisor.trial._preload"])
        _CONTEXT = ctx
    _CHECKED.add(workload)
    return _CONTEXT


_SERVER_FIELDS = ("_forkserver_address", "_forkserver_alive_fd", "_forkserver_pid")


def _retire_server() -> bool:
    """Let the running fork server go, so that the next process starts a new one; False
    when this Python's ``multiprocessing`` does not look as expected (then nothing changes).

    Its "alive" pipe is closed, as ``ForkServer._stop`` does, but without waiting: the
    server exits once the processes it forked have closed their ends too (a trial's leftover
    child may hold one for a while), and it is reaped later (``_reap``)."""
    from multiprocessing import forkserver, util

    server = forkserver._forkserver
    if not all(hasattr(server, name) for name in (*_SERVER_FIELDS, "_lock")):
        return False
    with server._lock:
        if server._forkserver_pid is not None:
            os.close(server._forkserver_alive_fd)
            _RETIRED.append(server._forkserver_pid)
            address = server._forkserver_address
            if address and not util.is_abstract_socket_namespace(address):
                with contextlib.suppress(OSError):
                    os.unlink(address)
        for name in (*_SERVER_FIELDS, "_forkserver_authkey"):
            if hasattr(server, name):
                setattr(server, name, None)
    return True


def _reap() -> None:
    """Collect the retired fork servers that have exited."""
    for pid in list(_RETIRED):
        try:
            done = os.waitpid(pid, os.WNOHANG)[0] != 0
        except ChildProcessError:
            done = True
        if done:
            _RETIRED.remove(pid)


def run_forked(payload: TrialPayload, rank_env: dict[str, str] | None = None) -> TrialResult:
    """Run ``advisor.trial.entry.run_trial(payload)`` in a process forked from the warm
    fork server and return its result; a process that dies without answering is a ``crash``.
    With ``rank_env`` (RANK, WORLD_SIZE, MASTER_ADDR, ...) the process is one rank of a
    trial placed on several nodes instead (``advisor.trial.ranks.run_placed_rank``).

    If CUDA turns out to have been initialised in the fork server (a library model.py
    imports did it at import), CUDA cannot work in a forked process: this trial and every
    later one of this worker then run in a spawned process (a fresh interpreter) instead.
    """
    global _SPAWN_ONLY
    if not _SPAWN_ONLY:
        result = _run_in(_context(payload), payload, rank_env)
        if isinstance(result, TrialResult):
            return result
        _SPAWN_ONLY = True  # the forked process answered CUDA_POISONED
    import multiprocessing

    result = _run_in(multiprocessing.get_context("spawn"), payload, rank_env)
    assert isinstance(result, TrialResult)  # a spawned process never answers CUDA_POISONED
    return result


def _run_in(ctx: Any, payload: TrialPayload, rank_env: dict[str, str] | None = None) -> TrialResult | str:
    """Run the trial in a process of ``ctx``; its stdout and stderr go to a drain here
    (advisor/trial/output.py), whose summary the result carries."""
    from multiprocessing.connection import Connection

    receive, send = ctx.Pipe(duplex=False)
    drain = trial_drain()
    output = Connection(os.dup(drain.write_fd), readable=False)  # passed to the child as send is
    submitted = time.perf_counter()
    forked = ctx.get_start_method() != "spawn"
    environ = dict(os.environ) | (rank_env or {})
    process = ctx.Process(target=_child, args=(payload, environ, os.getcwd(), submitted, send, forked, output,
                                               rank_env is not None), name="advisor-trial", daemon=False)
    try:
        with _bare_main():
            process.start()
    finally:
        send.close()
        output.close()
        drain.close_writer()
    try:
        result: TrialResult | str | None = receive.recv()
    except EOFError:
        result = None
    finally:
        receive.close()
        process.join()
        summary = drain.finish()
    if result is None:
        result = TrialResult.failed("crash", f"the trial process died ({describe_exit(process.exitcode)})")
    return with_output(result, summary) if isinstance(result, TrialResult) else result


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


def _child(payload: TrialPayload, environ: dict[str, str], cwd: str, submitted: float, conn: Any,
           forked: bool, output: Any, rank: bool = False) -> None:
    """The trial process (or, with ``rank``, one rank of a trial placed on several nodes):
    made to die with the fork server, given the task's environment, its stdout and stderr
    into ``output`` (the write end of the supervisor's drain)."""
    redirect_into(output.fileno())
    output.close()
    die_with_parent()
    niceness = normal_priority()  # a Ray worker's niceness is not the trial's
    rebuild_thread_pool()  # while this process has one thread (a forked one's first backward would race for it)
    mark_forked(forked)  # a spawned fallback (CUDA) must not fork ranks from itself
    adopt_environment(environ)
    os.chdir(cwd)
    if forked and _cannot_use_cuda(payload):
        conn.send(CUDA_POISONED)
        conn.close()
        return
    if rank:
        from advisor.trial.ranks import run_placed_rank

        result = run_placed_rank(payload, time.perf_counter())
    else:
        from advisor.trial.entry import run_trial

        result = run_trial(payload)
    result.phase_s["process_start"] = max(0.0, time.perf_counter() - submitted - result.phase_s.get("total", 0.0))
    result.telemetry["trial_process"] = "forked" if forked else "spawned"
    if niceness > 0:
        result.telemetry["niceness"] = niceness
    conn.send(result)
    conn.close()
    if rank:  # no interpreter teardown: gloo's can abort a finished rank (advisor/trial/ranks.py)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def _cannot_use_cuda(payload: TrialPayload) -> bool:
    """True when this forked trial needs CUDA and cannot have it: CUDA was initialised in
    the fork server before the fork (by a library model.py imports)."""
    if payload.settings.device != "cuda":
        return False
    import torch

    return bool(torch.cuda._is_in_bad_fork())
