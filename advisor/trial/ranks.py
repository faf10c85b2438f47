"""Data-parallel trials: one process per rank, launched the way ``torchrun`` launches them,
supervised by the trial's own (Ray worker) process.

Each rank runs ``python -m advisor.trial.ranks DIR`` (in a warm trial process, a fork of it
that runs the same ``main``: no interpreter start or imports) with RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR and MASTER_PORT set, measures the configuration in lockstep with the others
and writes its result to DIR/rank-N.json. The supervisor watches them: when a rank fails
or dies, the others are killed at once and the trial's result says which rank and why.
Ranks die with their supervisor (PR_SET_PDEATHSIG), so the trial timeout, which kills the
Ray worker, also ends a hung rank. Throughput is global samples/s (rank 0's step time);
peak memory is the maximum over ranks (the sum is kept in telemetry).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from advisor.core.results import TrialPayload, TrialResult
from advisor.trial.output import OutputDrain, describe_tail, redirect_into, trial_drain
from advisor.trial.process import ForkedChild, adopt_environment, can_fork, die_with_parent, scratch_dir
from advisor.trial.single import run_in_this_process

RANK_FAILED = 3  # exit status of a rank whose configuration failed (its result says why)


def run_ranks(payload: TrialPayload, world: int, poll_s: float = 0.05) -> TrialResult:
    """Run ``world`` ranks of the trial described by ``payload``; aggregate their results."""
    started = time.perf_counter()
    with scratch_dir("ranks") as tmp:
        directory = Path(tmp)
        (directory / "payload.json").write_text(json.dumps(payload.to_dict()))
        procs, drains = _launch(directory, world, payload.settings.device)
        try:
            failed = _supervise(procs, poll_s)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
            for p in procs:
                p.wait()
            outputs = [d.finish() for d in drains]
        results = [_read(directory, rank) for rank in range(world)]
        if failed is not None and all(r is not None and r.ok for r in results):
            failed = None  # every rank measured and wrote its result; it died while exiting
        if failed is not None:
            rank = _root_cause(failed, procs, results)
            return _failure(rank, procs[rank].returncode, results[rank], outputs[rank])
        missing = [r for r, res in enumerate(results) if res is None]
        if missing:
            return TrialResult.failed("crash", f"rank {missing[0]} exited without a result\n"
                                               f"{describe_tail(outputs[missing[0]])}")
    result = _aggregate([res for res in results if res is not None])
    result.telemetry["rank_output"] = [{"rank": r, "bytes": o["bytes"], "log": o["log"]} for r, o in enumerate(outputs)]
    # Starting the rank processes (interpreter, imports) and tearing them down.
    result.phase_s["launch"] = time.perf_counter() - started - result.phase_s.pop("rank", 0.0)
    return result


def _launch(directory: Path, world: int, device: str) -> tuple[list[Any], list[OutputDrain]]:
    """Start the ranks, each with its stdout and stderr drained here into a bounded log."""
    port = _free_port()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    procs: list[Any] = []
    drains: list[OutputDrain] = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                   LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   ADVISOR_SUPERVISOR_PID=str(os.getpid()))
        if device == "cpu":  # the cores are split between the ranks (the threads knob overrides)
            env["OMP_NUM_THREADS"] = str(max(1, cores // world))
        drains.append(trial_drain(f"rank{rank}"))
        try:
            if can_fork():  # torch is imported already (and CUDA not initialised): the rank starts as a fork
                procs.append(_forked_rank(directory, env, drains[-1].write_fd))
            else:
                procs.append(subprocess.Popen([sys.executable, "-m", "advisor.trial.ranks", str(directory)],
                                              env=env, stdout=drains[-1].write_fd, stderr=subprocess.STDOUT))
        finally:
            drains[-1].close_writer()
    return procs, drains


def _forked_rank(directory: Path, env: dict[str, str], log_fd: int) -> ForkedChild:
    """A rank forked from a warm trial process: its output into ``log_fd``, ``env`` its
    environment (with this rank's share of the cores)."""
    def run() -> int:
        redirect_into(log_fd)
        adopt_environment(env)
        return main(str(directory))

    return ForkedChild(run)


def _supervise(procs: list[Any], poll_s: float, grace_s: float = 3.0) -> list[int] | None:
    """Wait for every rank. Returns None when all succeeded, else the ranks that failed:
    after the first failure the others get ``grace_s`` to fail on their own (a peer's
    death surfaces as their collective erroring), so the root cause can be told apart."""
    while True:
        codes = [p.poll() for p in procs]
        if any(code not in (None, 0) for code in codes):
            deadline = time.monotonic() + grace_s
            while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
                time.sleep(poll_s)
            return [r for r, p in enumerate(procs) if p.poll() not in (None, 0)]
        if all(code == 0 for code in codes):
            return None
        time.sleep(poll_s)


# How a rank's collective fails when a peer died first: a consequence, not the cause.
_PEER_ERRORS = ("connection closed by peer", "connection reset by peer", "broken pipe", "socket timeout",
                "nccl communicator was aborted", "watchdog caught collective operation timeout")


def _root_cause(failed: list[int], procs: list[Any], results: list[TrialResult | None]) -> int:
    """The rank whose failure explains the others': killed by a signal, else failed with
    an error of its own, else the first."""
    for rank in failed:
        if (procs[rank].returncode or 0) < 0:
            return rank
    for rank in failed:
        res = results[rank]
        if res is not None and not any(e in (res.failure_message or "").lower() for e in _PEER_ERRORS):
            return rank
    return failed[0]


def _failure(rank: int, code: int | None, result: TrialResult | None, output: dict[str, Any]) -> TrialResult:
    if result is not None and not result.ok:  # the rank caught it: oom, error, unsupported, ...
        return TrialResult.failed(result.failure_class or "error", f"rank {rank}: {result.failure_message}",
                                  phase_s=result.phase_s)
    if code is not None and code < 0:
        how = f"was killed by {signal.Signals(-code).name}"
    else:
        how = f"exited with status {code}"
    return TrialResult.failed("crash", f"rank {rank} {how}; the other ranks were stopped\n{describe_tail(output)}")


def _aggregate(results: list[TrialResult]) -> TrialResult:
    first = results[0]
    peaks = [r.peak_memory_bytes or 0 for r in results]
    # "accuracy": the stored key, as studies have always held it (the rank's score)
    first.telemetry["ranks"] = [{"rank": i, "peak_memory_bytes": r.peak_memory_bytes, "step_time_median_s": r.step_time_median_s,
                                 "accuracy": r.score, "pid": r.pid, "host": r.host}
                                | ({"node": r.telemetry["node"]} if "node" in r.telemetry else {})
                                for i, r in enumerate(results)]
    first.telemetry["peak_memory_sum_bytes"] = sum(peaks)
    first.peak_memory_bytes = max(peaks)
    energies = [r.energy_per_sample_j for r in results]
    # each rank's GPU draws its own power for the same global samples: they add up
    first.energy_per_sample_j = sum(energies) if all(e is not None for e in energies) else None  # type: ignore[arg-type]
    return first


def _read(directory: Path, rank: int) -> TrialResult | None:
    try:
        return TrialResult.from_dict(json.loads((directory / f"rank-{rank}.json").read_text()))
    except (OSError, ValueError):
        return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_placed_rank(payload: TrialPayload, started: float) -> TrialResult:
    """One rank of a trial whose ranks were placed on several nodes by the runner (each a
    Ray task in a process of its own; RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT are in
    the environment): measure in lockstep with the others and wait for them at the end.
    The caller sends the result and leaves without tearing gloo down, as ``main`` does."""
    result = run_in_this_process(payload, started)
    result.host, result.pid = socket.gethostname(), os.getpid()
    result.phase_s["rank"] = time.perf_counter() - started
    if result.ok:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.barrier()
    return result


def combine(results: list[TrialResult]) -> TrialResult:
    """One result of the ranks' results (each a rank's, or the runner's account of a rank
    that never answered): the ranks aggregated when all measured, else the failure that
    explains the others' (a lost node first, then a rank's own error, not a peer's)."""
    failed = [r for r, res in enumerate(results) if not res.ok]
    if not failed:
        return _aggregate(results)
    lost = [r for r in failed if results[r].failure_class == "node_lost"]
    own = [r for r in failed if not any(e in (results[r].failure_message or "").lower() for e in _PEER_ERRORS)]
    rank = (lost or own or failed)[0]
    cause = results[rank]
    return TrialResult.failed(cause.failure_class or "error", f"rank {rank}: {cause.failure_message}",
                              phase_s=cause.phase_s)


def main(directory: str) -> int:
    """A rank's process: measure, write the result, leave the process group cleanly."""
    started = time.perf_counter()
    supervisor = int(os.environ.get("ADVISOR_SUPERVISOR_PID", "0")) or None
    die_with_parent(supervisor)  # a timed-out trial leaves no rank behind
    path = Path(directory)
    rank = int(os.environ["RANK"])
    payload = TrialPayload.from_dict(json.loads((path / "payload.json").read_text()))
    result = run_in_this_process(payload, started)
    result.host, result.pid = socket.gethostname(), os.getpid()
    result.phase_s["rank"] = time.perf_counter() - started
    tmp = path / f".rank-{rank}.json"
    tmp.write_text(json.dumps(result.to_dict()))
    tmp.replace(path / f"rank-{rank}.json")
    if not result.ok:
        sys.stdout.flush()
        os._exit(RANK_FAILED)  # peers may be blocked in a collective: the supervisor ends them
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()  # no rank leaves while a peer still has communication in flight
    # Leave without interpreter teardown: destroying gloo's threads at exit occasionally
    # aborts ("terminate called without an active exception", seen with the fp16 hook)
    # after the result is already written. The OS closes the sockets.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
