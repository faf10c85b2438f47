"""Trials wider than a node: one Ray task per rank, placed by a Ray placement group.

A trial whose ``devices`` exceed what one node has gets a placement group of ``devices``
bundles (one GPU each, or one CPU on CPU-only nodes), packed onto as few nodes as they
fit. Once Ray has placed it, a task on the first bundle names its node's address and a
free port (the rendezvous: MASTER_ADDR / MASTER_PORT), and each rank is a Ray task on its
bundle, run like a single trial in a process of its own (forked from the worker's warm
fork server; ``advisor.trial.ranks.run_placed_rank``). The results are combined as for
ranks on one node (``advisor.trial.ranks.combine``): a lost node fails the trial as
``node_lost``; when one rank fails, the others get a few seconds to fail on their own (a
peer's death surfaces in their collectives), then are cancelled.

Why not Ray Train's TorchTrainer: it keeps its workers (one actor per rank) for a run, owns
the process group's setup and reports through its own session; advisor needs a fresh process
per trial, its own ``apply()`` to join the process group exactly as ``torchrun`` would (so
the exported config reproduces the run), and the same measurement as on one node. A
placement group gives the placement, and nothing else.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from advisor.core.results import TrialPayload, TrialResult

PLACE_TIMEOUT_S = 120.0  # a placement group Ray cannot place by then: the trial is refused
GRACE_S = 3.0  # after a rank fails, how long the others get to fail on their own


@dataclass
class Placed:
    """A trial placed on several nodes (an ``executor.Handle``)."""

    number: int
    payload: TrialPayload
    group: Any  # the Ray placement group
    bundle: dict[str, float]
    submitted: float = field(default_factory=time.monotonic)
    ranks: list[Any] = field(default_factory=list)  # each rank's task, once placed
    results: dict[int, TrialResult] = field(default_factory=dict)
    first_failure: float | None = None
    ref: Any = None  # (no single task: see ``ranks``)
    refused: TrialResult | None = None


def place(number: int, payload: TrialPayload, bundle: dict[str, float]) -> Placed:
    """Ask Ray for ``devices`` bundles of ``bundle``, packed; returns at once."""
    from ray.util.placement_group import placement_group

    group = placement_group([dict(bundle) for _ in range(payload.config.devices)], strategy="PACK")
    return Placed(number, payload, group, bundle)


def advance(placed: Placed, result_of: Callable[[Any], TrialResult],
            capacity: Callable[[], int] | None = None) -> TrialResult | None:
    """Move ``placed`` on: start its ranks once Ray has placed the group, collect what they
    return; its result once every rank answered (or was cancelled), else None. While it
    waits to be placed, ``capacity`` (the ranks the cluster can host now) tells a cluster
    that lost the nodes it needed: failed as ``node_lost`` at once, not after the wait."""
    import ray

    if not placed.ranks:
        ready, _ = ray.wait([placed.group.ready()], timeout=0)
        if not ready:
            devices = placed.payload.config.devices
            if capacity is not None and capacity() < devices:
                release(placed)
                return TrialResult.failed("node_lost", f"the Ray cluster lost nodes while {devices} ranks waited to be "
                                                       f"placed; it now has {capacity()} (it may run again)")
            if time.monotonic() - placed.submitted > PLACE_TIMEOUT_S:
                release(placed)
                return TrialResult.failed("unsupported", f"Ray could not place {devices} ranks "
                                                         f"of {placed.bundle} within {PLACE_TIMEOUT_S:.0f} s")
            return None
        _start_ranks(placed)
    waiting = [ref for rank, ref in enumerate(placed.ranks) if rank not in placed.results]
    done, _ = ray.wait(waiting, num_returns=len(waiting), timeout=0)
    for rank, ref in enumerate(placed.ranks):
        if ref in done:
            placed.results[rank] = _on_node(result_of(ref), placed.group, rank)
    if any(not r.ok for r in placed.results.values()) and placed.first_failure is None:
        placed.first_failure = time.monotonic()
    if len(placed.results) < len(placed.ranks):
        if placed.first_failure is None or time.monotonic() - placed.first_failure < GRACE_S:
            return None
        for rank, ref in enumerate(placed.ranks):  # still waiting on a failed peer: stopped
            if rank not in placed.results:
                ray.cancel(ref, force=True)
                placed.results[rank] = TrialResult.failed("cancelled", "stopped after another rank failed")
    nodes = _nodes(placed.group)
    release(placed)
    from advisor.trial.ranks import combine

    result = combine([placed.results[r] for r in range(len(placed.ranks))])
    result.telemetry["placement"] = {"bundles": len(placed.ranks), "bundle": placed.bundle,
                                     "nodes": sorted(set(nodes.values()))}
    return result


def cancel(placed: Placed) -> None:
    import ray

    for ref in placed.ranks:
        ray.cancel(ref, force=True)
    release(placed)


def release(placed: Placed) -> None:
    from ray.util.placement_group import remove_placement_group

    try:
        remove_placement_group(placed.group)
    except Exception:  # noqa: BLE001 - already removed, or its node is gone with it
        pass


def _start_ranks(placed: Placed) -> None:
    """The rendezvous on the first bundle's node, then one task per rank on its bundle."""
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    def on(bundle: int) -> Any:
        return PlacementGroupSchedulingStrategy(placed.group, placement_group_bundle_index=bundle)

    cpus = placed.bundle.get("CPU", 1)
    gpus = placed.bundle.get("GPU", 0)
    address, port = ray.get(_remote("rendezvous", _rendezvous).options(num_cpus=0, scheduling_strategy=on(0))
                            .remote(), timeout=PLACE_TIMEOUT_S)
    world = placed.payload.config.devices
    task = _remote("rank", _placed_rank_task)
    for rank in range(world):
        env = {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
               "MASTER_ADDR": address, "MASTER_PORT": str(port), "OMP_NUM_THREADS": str(max(1, int(cpus)))}
        placed.ranks.append(task.options(num_cpus=cpus, num_gpus=gpus, scheduling_strategy=on(rank))
                            .remote(placed.payload, env))


_REMOTES: dict[str, Any] = {}


def _remote(name: str, function: Callable[..., Any]) -> Any:
    """The Ray remote function for ``function`` (made once)."""
    import ray

    if name not in _REMOTES:
        _REMOTES[name] = ray.remote(max_retries=0)(function)
    return _REMOTES[name]


def _rendezvous() -> tuple[str, int]:
    """This node's address and a free port on it: where rank 0 listens."""
    import socket

    import ray

    with socket.socket() as s:
        s.bind(("", 0))
        port = int(s.getsockname()[1])
    return ray.util.get_node_ip_address(), port


def _placed_rank_task(payload: TrialPayload, env: dict[str, str]) -> TrialResult:
    """A rank, in a process forked from this worker's fork server (Ray set its GPU)."""
    import ray

    from advisor.trial.forkserver import run_forked

    result = run_forked(payload, rank_env=env)
    result.telemetry["node"] = ray.get_runtime_context().get_node_id()
    return result


def _on_node(result: TrialResult, group: Any, rank: int) -> TrialResult:
    """A rank's result, saying which node it ran on (its bundle's, if it did not answer)."""
    result.telemetry.setdefault("node", _nodes(group).get(rank))
    return result


def _nodes(group: Any) -> dict[int, str]:
    """Each bundle's node id."""
    from ray.util.placement_group import placement_group_table

    try:
        return {int(k): v for k, v in placement_group_table(group).get("bundles_to_node_id", {}).items()}
    except Exception:  # noqa: BLE001 - a removed group has no table
        return {}
