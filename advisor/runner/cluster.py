"""Joining a Ray cluster named with ``--ray-address``, and what its trial nodes have.

The hardware that decides the search space and where trials run is the cluster's, not the
driver's: a driver on a CPU-only head node would otherwise drop every GPU option and run
GPU workers' trials as CPU trials (and a GPU driver would ask a CPU cluster for GPUs).
``cluster_hardware`` runs ``detect()`` as a Ray task on a node that trials will use, asking
for a GPU when any node offers one.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from advisor.core.errors import SchedulerError

RAY_INIT: dict[str, Any] = {"include_dashboard": False, "logging_level": "ERROR", "log_to_driver": False,
                            "configure_logging": False}
DETECT_TIMEOUT_S = float(os.environ.get("ADVISOR_DETECT_TIMEOUT", "120"))


def join_cluster(address: str) -> None:
    """Connect this process to the Ray cluster at ``address`` (once)."""
    import ray

    check_reachable(address)
    if ray.is_initialized():
        return
    try:
        ray.init(address=address, **RAY_INIT)
    except Exception as exc:
        raise SchedulerError(f"cannot join the Ray cluster at {address!r}{_from_env(address)}: {exc}") from None


def cluster_hardware(address: str) -> Any:
    """The Hardware of a node trials will run on: read there by a Ray task that asks for a
    GPU when a node of the cluster offers one, else for a CPU."""
    import ray

    join_cluster(address)
    alive = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    gpus = any(r.get("GPU", 0) >= 1 for r in alive)
    task = ray.remote(num_gpus=1, num_cpus=0)(_detect_here) if gpus else ray.remote(num_cpus=1)(_detect_here)
    try:
        hardware = ray.get(task.remote(), timeout=DETECT_TIMEOUT_S)
    except ray.exceptions.GetTimeoutError:
        raise SchedulerError(f"the Ray cluster at {address!r} ran no task within {DETECT_TIMEOUT_S:.0f} s to "
                             f"read a node's hardware (asked for {'a GPU' if gpus else 'a CPU'}; are they all "
                             "busy?)") from None
    if gpus and not hardware.gpus:
        hardware = dataclasses.replace(hardware, notes=(*hardware.notes, (
            "the Ray cluster offers GPUs, but torch on the node given one sees no CUDA device: trials run on "
            "CPUs (check that node's driver and its torch build)")))
    nodes = cluster_nodes()
    total = sum(n["GPU"] for n in nodes) if hardware.gpus else sum(n["CPU"] for n in nodes if not gpus or n["GPU"])
    return dataclasses.replace(hardware, cluster_devices=int(total))


def cluster_nodes() -> list[dict[str, Any]]:
    """The alive nodes of the joined cluster: id, address, CPUs, GPUs (Ray's counts)."""
    import ray

    return [{"node": n.get("NodeID", "")[:12], "address": n.get("NodeManagerAddress", "?"),
             "CPU": int(n.get("Resources", {}).get("CPU", 0)), "GPU": int(n.get("Resources", {}).get("GPU", 0))}
            for n in ray.nodes() if n.get("Alive")]


def _detect_here() -> Any:
    """detect() on this Ray worker, saying where it ran."""
    import ray

    from advisor.machine.hardware import detect

    hardware = detect()
    where = (f"read on Ray node {ray.util.get_node_ip_address()} "
             f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})")
    return dataclasses.replace(hardware, notes=(*hardware.notes, where))


def check_reachable(address: str, timeout: float = 5.0) -> None:
    """Refuse an unreachable HOST:PORT at once (ray.init would retry for minutes)."""
    import socket

    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return  # "auto" and other forms: left to Ray
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as exc:
        raise SchedulerError(f"cannot reach the Ray cluster at {address!r}{_from_env(address)}: "
                             f"{exc.strerror or exc} (is `ray start --head` running there?)") from None


def _from_env(address: str) -> str:
    """' (from $RAY_ADDRESS)' when that is where the address came from, as far as can be told."""
    return " (from $RAY_ADDRESS; unset it for a local Ray)" if os.environ.get("RAY_ADDRESS", "").strip() == address \
        else ""
