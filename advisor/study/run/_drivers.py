"""Several drivers on one study: `advisor tune` started on several machines with the same
``--storage`` (a shared database server) and study spreads one search over them.

Each driver announces itself in a study attribute (``driver:<id>``: host, pid, hardware,
a heartbeat renewed every ``BEAT_S`` seconds, also while it waits on a long measurement:
``Beating``) and tags each trial it starts with its id (``DRIVER``). A trial left RUNNING
by a driver that is gone (on this host: its process no longer exists, or it is this
process and that driver no longer runs in it; elsewhere: no heartbeat for ``GRACE_S``
seconds) is stale: any driver marks it failed, and its
configuration runs again. One-off steps of the study (the baseline's extra seeds, the
final confirmation) are claimed (``claim``) so that one driver does them while the others
go on.

The Optuna storage offers no compare-and-set; while other drivers are live a claim is
written, left to settle for ``SETTLE_S`` and read back, so two drivers do one step twice
only if they claim it within milliseconds of each other (a driver alone claims at once).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from advisor.core.errors import StudyError
from advisor.core.events import Listener, Note
from advisor.core.study_attrs import DRIVER_PREFIX, StudyAttrs
from advisor.machine.hardware import fingerprint
from advisor.study.run._trial_writes import fail_stale
from advisor.study.storage.guard import shown_url

if TYPE_CHECKING:
    from advisor.core.results import TrialPayload, TrialResult
    from advisor.runner.executor import Executor, Handle

PREFIX = DRIVER_PREFIX  # study attribute: + a driver's id -> its record (advisor.core.study_attrs)
BEAT_S = 5.0  # how often a driver renews its heartbeat
GRACE_S = 60.0  # a driver on another host is gone when its heartbeat is older than this
SETTLE_S = 0.5  # how long a claim is left before it is read back
# the drivers running in this process (announced, not yet left): a record of this host and
# pid under another id is an earlier run of this process (`advisor.tune()` again in a notebook
# after an outage or a full disk left its "stopped" unwritten), gone, not a live peer
_IN_THIS_PROCESS: set[str] = set()


@dataclass(frozen=True)
class Peer:
    """A driver as its study attribute records it."""

    id: str
    host: str
    pid: int
    at: float  # its latest heartbeat (POSIX seconds)
    hardware: str | None
    stopped: bool = False

    @classmethod
    def of(cls, driver_id: str, record: Any) -> Peer | None:
        if not isinstance(record, dict):
            return None
        return cls(driver_id, str(record.get("host", "")), int(record.get("pid", 0)), float(record.get("at", 0.0)),
                   record.get("hardware"), bool(record.get("stopped")))


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return pid > 0


class Drivers:
    """This driver's presence in ``study`` and what it knows of the others.

    Args:
        study: the Optuna study; hardware: this machine's fingerprint (drivers of one study
            must measure on the same hardware: every ratio is to one baseline).
        clock: POSIX seconds (tests pass their own).
    """

    def __init__(self, study: Any, hardware: str | None = None, clock: Callable[[], float] = time.time) -> None:
        self.study, self.hardware, self.clock = study, hardware, clock
        self.attrs = StudyAttrs(study)
        self.host = socket.gethostname()
        self.id = f"{self.host}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self._beaten = -float("inf")
        self.shared = False  # another live driver has been seen on this study

    # ---- presence ---------------------------------------------------------------------
    def beat(self, force: bool = False) -> bool:
        """Renew the heartbeat when due (or ``force``); True when it was written."""
        now = self.clock()
        if not force and now - self._beaten < BEAT_S:
            return False
        self._beaten = now
        _IN_THIS_PROCESS.add(self.id)
        self.attrs.set_heartbeat(self.id, {"host": self.host, "pid": os.getpid(), "at": now,
                                           "hardware": self.hardware})
        return True

    def leave(self) -> None:
        """Recorded as stopped (its RUNNING trials, if any, are stale at once)."""
        _IN_THIS_PROCESS.discard(self.id)  # gone from this process, even when the storage refuses the record
        self.attrs.set_heartbeat(self.id, {"host": self.host, "pid": os.getpid(), "at": self.clock(),
                                           "hardware": self.hardware, "stopped": True})

    def peers(self, attrs: dict[str, Any] | None = None) -> dict[str, Peer]:
        """Every driver recorded on the study, by id (``attrs``: the study's, if read already)."""
        found = (Peer.of(driver, value) for driver, value in self.attrs.heartbeats(attrs).items())
        return {p.id: p for p in found if p is not None}

    def alive(self, driver_id: str | None, peers: dict[str, Peer] | None = None) -> bool:
        """Whether the driver ``driver_id`` still runs (this one does; None, from a version
        before drivers were recorded, does not)."""
        if driver_id == self.id:
            return True
        peer = (peers if peers is not None else self.peers()).get(driver_id or "")
        if peer is None or peer.stopped:
            return False
        if peer.host == self.host:
            if peer.pid == os.getpid():
                return peer.id in _IN_THIS_PROCESS
            return _process_exists(peer.pid) and self.clock() - peer.at < GRACE_S
        return self.clock() - peer.at < GRACE_S

    def others(self, peers: dict[str, Peer] | None = None) -> list[Peer]:
        """The other drivers alive now."""
        peers = self.peers() if peers is None else peers
        live = [p for p in peers.values() if p.id != self.id and self.alive(p.id, peers)]
        self.shared = self.shared or bool(live)
        return live

    def mismatched(self, peers: dict[str, Peer] | None = None) -> list[Peer]:
        """Live drivers measuring on other hardware than this one."""
        return [p for p in self.others(peers) if p.hardware and self.hardware and p.hardware != self.hardware]

    # ---- one-off steps ----------------------------------------------------------------
    def holder(self, step: str) -> str | None:
        """The live driver doing ``step`` (None when nobody is)."""
        attrs = self.attrs.all()
        holder = self.attrs.claimed_by(step, attrs)
        return holder if holder is not None and self.alive(holder, self.peers(attrs)) else None

    def claim(self, step: str, sleep: Callable[[float], None] = time.sleep) -> bool:
        """Take ``step`` unless a live driver holds it; True when this driver does it.

        The claim settles only when another live driver is recorded once it is written: a
        driver announces itself (``join_study``) before it reads or writes a claim, so one
        that is not recorded by then will read this claim and leave the step alone. A
        driver alone on its study (the usual case) claims at once."""
        holder = self.holder(step)
        if holder is not None:
            return holder == self.id
        self.attrs.set_claim(step, self.id)
        if not self.others():
            return True
        sleep(SETTLE_S)
        return self.attrs.claimed_by(step) == self.id

    def fail_stale(self, storage: Any, keep_probed: bool) -> list[int]:
        """Mark failed the RUNNING trials that gone drivers left (``trial_writes.fail_stale``);
        returns their numbers. A trial that names no driver yet is left alone for
        ``GRACE_S`` while another driver lives (it may just have asked for it and tags it
        within milliseconds); with none alive it is a leftover at once (a killed driver's,
        or one from before drivers were recorded)."""
        peers = self.peers()
        live = self.others(peers)
        return fail_stale(self.study, storage, keep_probed=keep_probed, young_s=GRACE_S if live else 0.0,
                          alive=lambda driver: self.alive(driver, peers))

    def release(self, step: str) -> None:
        """``step`` is done (or given up): nobody holds it."""
        if self.attrs.claimed_by(step) == self.id:
            self.attrs.set_claim(step, None)


class Beating:
    """``executor`` whose waits also renew ``drivers``' heartbeat when it is due: the steps
    that wait on one measurement at a time (the baseline's extra seeds and re-measurements,
    the front's extra seeds, the paired confirmation) keep the driver alive in the study,
    however long that measurement runs, as the search loop does between its trials
    (``RunContext.keep_up``); else another host's drivers would call it gone after
    ``GRACE_S`` and fail its running trial."""

    def __init__(self, executor: Executor, drivers: Drivers) -> None:
        self.executor, self.drivers = executor, drivers
        self.device, self.slots = executor.device, executor.slots  # the started executor's
        self.resources, self.startup_s = executor.resources, executor.startup_s

    def submit(self, number: int, payload: TrialPayload) -> Handle:
        return self.executor.submit(number, payload)

    def wait(self, handles: Sequence[Handle], timeout: float) -> list[tuple[Handle, TrialResult]]:
        self.drivers.beat()
        return self.executor.wait(handles, timeout)

    def cancel(self, handle: Handle) -> None:
        self.executor.cancel(handle)

    def shutdown(self) -> None:
        self.executor.shutdown()


def hardware_id(fingerprint: dict[str, Any]) -> str:
    """A short id of a hardware fingerprint (``advisor.machine.hardware.fingerprint``)."""
    return hashlib.sha256(json.dumps(fingerprint, sort_keys=True, default=str).encode()).hexdigest()[:16]


def join_study(study: Any, storage: Any, plan: Any, on_event: Listener) -> Drivers:
    """This driver joins ``study``: refused (StudyError, nothing written) while a live
    driver measures it on other hardware; then announced, and the trials that gone
    drivers left running marked failed. ``plan``: the study's ``StudyPlan`` (not imported
    here: plan.py asks this module whether a study holds anything measured)."""
    drivers = Drivers(study, hardware_id(fingerprint(plan.hardware)))
    peers = drivers.peers()
    for p in drivers.mismatched(peers):
        raise StudyError(f"study {plan.study_name!r} in {shown_url(plan.storage_url)} is being run by driver {p.id} on "
                         "different hardware; every ratio in a study is to one baseline, measured on one kind of "
                         "machine: run the other drivers on the same hardware, or use --study NEW_NAME")
    drivers.beat(force=True)
    for number in drivers.fail_stale(storage, keep_probed=plan.options.two_stage):
        on_event(Note(f"trial {number} was left running by an earlier run: marked failed"))
    live = drivers.others(peers)
    if live:
        on_event(Note(f"{len(live)} other driver(s) run this study ({', '.join(p.id for p in live)}): "
                      f"its {plan.options.trials} trials are shared out"))
    return drivers


def nothing_measured(study: Any, drivers: Drivers) -> bool:
    """Whether ``study`` holds nothing measured: failed trials (at least one) and perhaps
    proposals left waiting, none complete, probed or running; and no other driver is alive
    on it (``Drivers.alive``: on this host its process exists, elsewhere its heartbeat is
    younger than ``GRACE_S``). Such a study, left by a failed baseline, is not kept: the
    fixed model.py runs with the same command (the run that failed deletes it; a study an
    earlier version kept is replaced on open)."""
    states = {t.state.name for t in study.get_trials(deepcopy=False)}
    return "FAIL" in states and states <= {"FAIL", "WAITING"} and not drivers.others()

