"""Ray: start or join a cluster, run each trial in a fresh process, cancel on timeout.

Each trial runs in a process of its own, forked from a warm fork server kept by the Ray
worker (advisor/trial/forkserver.py), so no state leaks between trials and none pays for importing
torch again; with ``ADVISOR_COLD_TRIALS=1`` each trial is a Ray task with ``max_calls=1``
instead (a fresh worker). ``max_retries=0``: a failed configuration is a result, not
something to retry. Honest timings need exclusive resources: on CPU-only nodes a
trial takes all of a node's CPUs (one trial per node at a time); on GPU nodes, one GPU.
A parallel trial with more ranks than a node has is placed on several
(``advisor.runner.placement``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import random
import secrets
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from advisor.core.errors import SchedulerError
from advisor.core.results import TrialPayload, TrialResult
from advisor.core.units import first_line
from advisor.runner import leftovers, placement
from advisor.runner.cluster import RAY_INIT, join_cluster
from advisor.trial.forkserver import cold

START_TRIES = 2  # a local Ray that fails to start is started once more (its ports are drawn at random)
LOCAL_RAY_CONFIG = {
    # workers at the usual priority, not Ray's default niceness 15: trials are measurements, and
    # at 15 any other program takes their CPU first (advisor/trial/process.py normal_priority)
    "worker_niceness": 0,
    # no idle workers started for the driver: one trial runs per node at a time (per GPU on a GPU
    # node), and each idle worker costs an interpreter start (~0.8 s of CPU, ~100 MB here) while
    # the driver plans and checks the workload; the first trial starts its worker (~0.3 s)
    "prestart_worker_first_driver": False,
}


@dataclass
class Running:
    """A submitted trial (an ``executor.Handle``): its Ray object ref and when it was submitted."""

    number: int
    ref: Any
    submitted: float = field(default_factory=time.monotonic)
    refused: TrialResult | None = None  # answered without running (no node can host it)
    started_file: str | None = None  # created by the trial's process as it starts (executor.overran)


def default_state_dir() -> Path:
    """Where the embedded Ray instance keeps its state (short: Ray's sockets live there)."""
    env = os.environ.get("ADVISOR_RAY_DIR")
    return Path(env) if env else Path(tempfile.gettempdir()) / f"advisor-ray-{os.getuid()}"


class RayExecutor:
    """Runs trials as Ray tasks (an ``executor.Executor``). ``start()`` before use,
    ``shutdown()`` after.

    Args:
        device: "cpu" or "cuda": what a trial needs.
        address: join this Ray cluster instead of starting an embedded local instance.
        state_dir: the embedded instance's temp dir (created private to the user).
        env: environment variables every trial's Ray worker starts with (a runtime env of its
            own: a library that reads one at import, in the warm fork server, sees it too).
        preload: what the trials' fork servers import ahead (``TrialPayload.preload``,
            ``advisor.techniques.registry.preloads`` of the values the trials may take), on a
            CPU only: on a GPU a library imported in the fork server could initialise CUDA there,
            and every later trial would then start a fresh interpreter (``advisor.trial.forkserver``).
    """

    def __init__(self, device: str = "cpu", address: str | None = None, state_dir: Path | None = None,
                 env: dict[str, str] | None = None, preload: tuple[str, ...] = ()) -> None:
        self.device = device
        self.address = address
        self.env = dict(env or {})
        self.preload = tuple(preload) if device == "cpu" else ()
        self.state_dir = state_dir or default_state_dir()
        self.started_here = False
        self.resources: dict[str, float] = {}
        self.slots = 1
        self.max_gpus_per_node = 0
        self.per_node = 1  # the most ranks one node can host: GPUs, or CPUs on CPU-only nodes
        self.cluster_devices = 1  # the most ranks one trial can have over every node
        self.startup_s = 0.0
        self.started = False
        self.started_dir: Path | None = None  # where trials say they started (a Ray of this machine alone)

    def start(self) -> RayExecutor:
        t = time.perf_counter()
        if not self.address:
            _loopback_only()
        import ray

        if self.address:
            join_cluster(self.address)
        elif not ray.is_initialized():
            self._start_local(ray)
        self.startup_s = time.perf_counter() - t
        nodes = ray.nodes()
        self._plan_resources(nodes)
        alive = [n for n in nodes if n.get("Alive")]
        if not self.address and len(alive) == 1 and alive[0].get("NodeID") == ray.get_runtime_context().get_node_id():
            self.started_dir = self._private_dir("started")
            leftovers.sweep(self.started_dir)  # the temp folders of an earlier run's workers
            leftovers.sweep_scratch()  # and of its killed trial processes
        self.started = True
        return self

    def _start_local(self, ray: Any) -> None:
        """A Ray instance of our own on this machine: address "local", so that a RAY_ADDRESS
        in the environment (which `advisor tune` reads as --ray-address) does not make
        ray.init join, or wait minutes for, another cluster."""
        where = f"its state in {self.state_dir} ($ADVISOR_RAY_DIR)"
        try:
            self._prepare_state_dir()
        except OSError as exc:
            raise SchedulerError(f"cannot start Ray on this machine: {where} cannot be made private to you "
                                 f"({exc.strerror or exc}: {exc.filename or self.state_dir}); set ADVISOR_RAY_DIR "
                                 "to a directory of yours") from None
        logging.getLogger("ray._private.authentication.authentication_token_setup").addFilter(_not_the_auth_notice)
        for attempt in range(START_TRIES):
            try:  # Ray makes its temp dir world-writable (0777); inside our 0700 directory nobody else can reach it
                ray.init(address="local", _temp_dir=str(self.state_dir / "ray"), _system_config=LOCAL_RAY_CONFIG,
                         **RAY_INIT)
                break
            except Exception as exc:
                with contextlib.suppress(Exception):
                    ray.shutdown()  # whatever it started before failing
                long_path = "path length" in str(exc)
                if attempt + 1 < START_TRIES and not long_path:
                    # Ray draws some of its ports at random: two instances starting at once on one
                    # machine (several drivers, a test suite) can draw the same one (ray-project/ray#53906)
                    time.sleep(random.uniform(0.5, 2.0))
                    continue
                hint = ("; set ADVISOR_RAY_DIR to a shorter directory: Ray's unix sockets lie about 70 characters "
                        "below it, and a socket's path has at most 107 bytes") if long_path else ""
                tries = f" (tried {START_TRIES} times)" if attempt else ""
                raise SchedulerError(f"cannot start Ray on this machine ({where}){tries}: {type(exc).__name__}: "
                                     f"{first_line(str(exc))}{hint} (README: Troubleshooting)") from None
        self.started_here = True

    def _prepare_state_dir(self) -> None:
        self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.state_dir, 0o700)
        # Ray's token auth: keep the token with our state, not in ~/.ray, readable by us only.
        token = self.state_dir / "auth_token"
        if "RAY_AUTH_TOKEN" not in os.environ and "RAY_AUTH_TOKEN_PATH" not in os.environ:
            if not token.exists():
                fd = os.open(token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as fh:
                    fh.write(secrets.token_hex(32))
            os.environ["RAY_AUTH_TOKEN_PATH"] = str(token)

    def _plan_resources(self, nodes: list[dict[str, Any]]) -> None:
        """Choose what one trial asks for; refuse up front what no node can give."""
        alive = [n["Resources"] for n in nodes if n.get("Alive")]
        if self.device == "cuda":
            gpu_nodes = [r for r in alive if r.get("GPU", 0) >= 1]
            if not gpu_nodes:
                raise SchedulerError("trials need a CUDA GPU but no node of the Ray cluster has one "
                                     f"(nodes: {_describe(alive)})")
            cpus = min(r.get("CPU", 1) / r["GPU"] for r in gpu_nodes)
            self.resources = {"num_gpus": 1, "num_cpus": max(1, int(cpus))}
            self.slots = int(sum(r["GPU"] for r in gpu_nodes))
            self.max_gpus_per_node = self.per_node = int(max(r["GPU"] for r in gpu_nodes))
            self.cluster_devices = self.slots
        else:
            cpu_nodes = [r for r in alive if r.get("CPU", 0) >= 1]
            if not cpu_nodes:
                raise SchedulerError(f"no node of the Ray cluster offers a CPU (nodes: {_describe(alive)})")
            # All of the smallest node's CPUs: one trial per node at a time.
            self.resources = {"num_cpus": int(min(r["CPU"] for r in cpu_nodes))}
            self.slots = len(cpu_nodes)
            self.per_node = int(min(r["CPU"] for r in cpu_nodes))
            self.cluster_devices = int(sum(r["CPU"] for r in cpu_nodes))

    def slots_for(self, config: Any) -> int:
        """How many of ``slots`` a trial of ``config`` takes: its GPUs, or on CPU nodes the
        nodes it needs (one, unless its ranks span several)."""
        if self.device == "cuda":
            return config.devices
        return -(-config.devices // self.per_node) if self.spans(config) else 1

    def spans(self, config: Any) -> bool:
        """A parallel trial with more ranks than one node hosts: placed on several."""
        return config.parallelism != "single" and config.devices > self.per_node

    def submit(self, number: int, payload: TrialPayload) -> Running | placement.Placed:
        """Start a trial. A parallel GPU trial asks for all its GPUs on one node at once, or
        is placed on several nodes (``advisor.runner.placement``) when no node has that many;
        one that the whole cluster could not host is answered at once instead of waiting forever."""
        import ray

        if self.preload and not payload.preload:
            payload = dataclasses.replace(payload, preload=self.preload)
        resources = dict(self.resources)
        config = payload.config
        for refresh in (False, True):  # the cluster as last seen, then as it is now (a node may have gone)
            if config.devices > self.cluster_devices and config.parallelism != "single":
                unit = "GPUs" if self.device == "cuda" else "CPUs"
                return Running(number, None, refused=TrialResult.failed(
                    "unsupported", f"devices={config.devices} needs {config.devices} {unit}; the Ray cluster has "
                                   f"{self.cluster_devices} over all its nodes"))
            if not refresh and self.spans(config):
                try:
                    self._plan_resources(ray.nodes())
                except SchedulerError as exc:
                    return Running(number, None, refused=TrialResult.failed("node_lost", str(exc)))
        if self.spans(config):
            bundle = ({"GPU": 1, "CPU": resources["num_cpus"]} if self.device == "cuda" else {"CPU": 1})
            return placement.place(number, payload, bundle)
        if self.device == "cuda" and config.devices > 1:
            resources = {"num_gpus": config.devices, "num_cpus": resources["num_cpus"] * config.devices}
        started_file = None
        if self.started_dir is not None:  # the trial says here when its process starts (executor.overran)
            started_file = str(self.started_dir / f"{os.getpid()}-{number}-{secrets.token_hex(4)}")
            payload = dataclasses.replace(payload, started_file=started_file)
        return Running(number, _remote(resources, self.env).remote(payload), started_file=started_file)

    def _private_dir(self, name: str) -> Path | None:
        """``name`` in the state directory, both made private to us; None when that cannot
        be (or another user owns it: they could say our trials started). Used only where
        the trials run on this machine: a cluster's other nodes could not show its files."""
        folder = self.state_dir / name
        try:
            self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            folder.mkdir(mode=0o700, exist_ok=True)
            return folder if folder.stat().st_uid == os.getuid() else None
        except OSError:
            return None

    def wait(self, running: Sequence[Any], timeout: float) -> list[tuple[Any, TrialResult]]:
        """Return the trials that finished within ``timeout`` seconds, with their results."""
        import ray

        done = [(r, r.refused) for r in running if r.refused is not None]
        for r in running:
            if isinstance(r, placement.Placed) and r.refused is None:
                result = placement.advance(r, self._result, self._capacity)
                if result is not None:
                    done.append((r, result))
        refs = [r.ref for r in running if r.refused is None and r.ref is not None]
        if not refs:
            if not done and any(isinstance(r, placement.Placed) for r in running):
                time.sleep(min(timeout, 0.05))  # placed trials are polled
            return done
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0 if done else timeout, fetch_local=True)
        for r in running:
            if r.refused is None and r.ref is not None and r.ref in ready:
                done.append((r, self._result(r.ref)))
                _forget_start(r)
        return done

    def _capacity(self) -> int:
        """The ranks the cluster can host now (its alive nodes' GPUs, or CPUs)."""
        import ray

        key = "GPU" if self.device == "cuda" else "CPU"
        return int(sum(n["Resources"].get(key, 0) for n in ray.nodes() if n.get("Alive")))

    def _result(self, ref: Any) -> TrialResult:
        import ray
        from ray import exceptions as rex

        try:
            result: TrialResult = ray.get(ref)
            return result
        except rex.TaskCancelledError:
            return TrialResult.failed("cancelled", "the trial was cancelled")
        except rex.OutOfMemoryError as exc:
            return TrialResult.failed("oom", f"Ray's memory monitor killed the worker: {first_line(exc, 500)}")
        except (rex.WorkerCrashedError, rex.NodeDiedError, rex.ActorDiedError, rex.LocalRayletDiedError) as exc:
            if isinstance(exc, rex.NodeDiedError) or "node it was running on is dead" in str(exc):
                return TrialResult.failed("node_lost", "the cluster node running this trial was lost (not a "
                                                       "failure of the configuration; it may run again): "
                                                       f"{first_line(exc, 500)}")
            return TrialResult.failed("crash", f"the worker process died: {first_line(exc, 500)}")
        except rex.RayTaskError as exc:
            return TrialResult.failed("error", f"the trial task raised: {exc}"[-4000:])
        except rex.RayError as exc:
            return TrialResult.failed("crash", f"{type(exc).__name__}: {first_line(exc, 500)}")

    def cancel(self, running: Any) -> None:
        import ray

        if isinstance(running, placement.Placed):
            placement.cancel(running)
        elif running.ref is not None:
            ray.cancel(running.ref, force=True)
        _forget_start(running)

    def shutdown(self) -> None:
        import ray

        for left in self.started_dir.glob(f"{os.getpid()}-*") if self.started_dir is not None else ():
            with contextlib.suppress(OSError):  # a trial cancelled before it started
                left.unlink()
        if self.started_here and ray.is_initialized():
            ray.shutdown()
            leftovers.sweep(self.started_dir, wait_s=3.0)  # its workers' temp folders, once they have exited
            leftovers.sweep_scratch()


def _forget_start(running: Any) -> None:
    """Remove a finished or cancelled trial's ``started_file``."""
    if getattr(running, "started_file", None):
        with contextlib.suppress(OSError):
            os.unlink(running.started_file)


def _not_the_auth_notice(record: logging.LogRecord) -> bool:
    """Drops Ray's notice, at every local start, that it turned token authentication on by
    default: it stays on, with a token of ours kept in the state directory."""
    return not str(record.msg).startswith("Token authentication is enabled for this Ray cluster")


def _loopback_only() -> None:
    """Keep the embedded Ray instance on 127.0.0.1: Ray binds its servers to the node IP,
    which is the machine's network address unless Ray is told it runs no cluster
    (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, read by the driver and every Ray process it
    starts). Joining a cluster with --ray-address leaves this alone."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import sys

    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None and hasattr(constants, "ENABLE_RAY_CLUSTER"):
        constants.ENABLE_RAY_CLUSTER = False  # ray was imported before the variable was set


_REMOTES: dict[tuple[Any, ...], Any] = {}


def _remote(resources: dict[str, float], env: dict[str, str]) -> Any:
    """The Ray remote function for a trial asking for ``resources``, its worker started
    with ``env`` (made once each)."""
    import ray

    fresh = cold()
    key = (fresh, *sorted(resources.items()), *sorted(env.items()))
    if key not in _REMOTES:
        # Warm: the worker (and its fork server) is reused; each trial forks its own process.
        task = _cold_trial_task if fresh else _warm_trial_task
        extra = {"runtime_env": {"env_vars": env}} if env else {}
        _REMOTES[key] = ray.remote(max_calls=1 if fresh else 0, max_retries=0, **resources, **extra)(task)
    return _REMOTES[key]


def _cold_trial_task(payload: TrialPayload) -> TrialResult:
    from advisor.trial.entry import run_trial
    from advisor.trial.output import LOG_BYTES, captured_here, trial_log_path, with_output

    with captured_here(trial_log_path(), LOG_BYTES) as output:  # the worker's stdout and stderr, while it runs
        result = run_trial(payload)
    result.telemetry["trial_process"] = "ray_worker"
    return with_output(result, output.summary())


def _warm_trial_task(payload: TrialPayload) -> TrialResult:
    from advisor.trial.forkserver import run_forked

    if payload.started_file:  # a Ray of this machine alone: say where this worker's fork server listens
        leftovers.note_tempdir(Path(payload.started_file).parent)
    return run_forked(payload)


def _describe(resources: list[dict[str, Any]]) -> str:
    if not resources:
        return "none alive"
    return "; ".join(", ".join(f"{k}={v:g}" for k, v in sorted(r.items()) if k in ("CPU", "GPU")) or "no CPU/GPU"
                     for r in resources)

