"""A configuration's peak memory per rank, estimated before the trial allocates any of it.

In a child of the trial's process (forked from a warm trial, else a fresh interpreter), so
that neither the fake process group nor fake tensors touch the trial: for each rank it
estimates, the child joins a fake process group as that rank (collectives do nothing),
builds the model under ``FakeTensorMode``, applies the configuration with
``advisor.apply()`` (the same code path the trial runs), and runs two training steps, the
second with the optimizer's state, on a batch of the rank's size under PyTorch's memory
tracker; its peak is the estimate (what torchtitan's estimation script does).

Ranks alike (DDP, FSDP, TP, 2-D) are estimated once, as rank 0; a pipeline's every stage.
DDP's reducer takes no fake tensors: a DDP rank is the single-process step at the rank's
batch plus its gradient buckets (the size of the gradients; none with bucket views). A
compiled configuration is estimated in eager mode.

Private PyTorch APIs, read in torch 2.13 (a change makes the estimate ``unavailable`` with
the reason, never a failed trial): ``torch.distributed._tools.mem_tracker.MemTracker`` (its
per-module hooks are switched off: they refuse a module called twice in one step, as a
pipeline stage is once per micro-batch), ``torch.testing._internal.distributed.fake_pg``
(the "fake" backend and ``FakeStore``) and ``torch._subclasses.fake_tensor``.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from advisor.core.config import TrialConfig
from advisor.core.results import TrialPayload
from advisor.machine.memory import device_memory

if TYPE_CHECKING:
    from advisor.trial.single import Loaded

TIMEOUT_S = float(os.environ.get("ADVISOR_ESTIMATE_TIMEOUT", "120"))
METHOD = "FakeTensorMode + MemTracker over a fake process group (torch 2.13 private APIs)"
_RANK_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK")  # what a rank's estimate sets, and puts back after
OUTPUT = "output.log"  # the child's stdout and stderr, in the estimate's directory: why it died, if it does
_DDP_ONLY = {"comm_hook": "none", "bucket_mb": 25, "ddp_static_graph": False, "ddp_bucket_view": False,
             "sync_batchnorm": False}


def estimate_memory(payload: TrialPayload, timeout_s: float = TIMEOUT_S, loaded: Loaded | None = None) -> dict[str, Any]:
    """Each estimated rank's peak memory, in a child process: ``{"peak_bytes", "ranks",
    "by_kind", "seconds", "method"}``, or ``{"unavailable": reason}``. ``loaded``: model.py
    and its datasets, already loaded in this process (a forked child uses them)."""
    from advisor.trial.process import can_fork, scratch_dir

    started = time.perf_counter()
    with scratch_dir("estimate") as tmp:
        directory = Path(tmp)
        (directory / "payload.json").write_text(json.dumps(payload.to_dict()))
        forked = can_fork()
        if forked:
            child = _forked(directory, loaded)
        else:
            with open(directory / OUTPUT, "wb") as output:
                child = subprocess.Popen([sys.executable, "-m", "advisor.trial.estimate", tmp],
                                         stdout=output, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        if child.poll() is None:
            child.kill()
            child.wait()
            return {"unavailable": f"the estimate took longer than {timeout_s:.0f} s"}
        try:
            found = json.loads((directory / "estimate.json").read_text())
        except (OSError, ValueError):
            return {"unavailable": _ended_without(child.poll(), directory / OUTPUT)}
    found["seconds"] = time.perf_counter() - started
    found["process"] = "forked" if forked else "fresh interpreter"  # what its seconds paid for
    return found


def _ended_without(code: int | None, output: Path) -> str:
    """Why there is no estimate when the child ended without writing one: how it ended, and
    the last thing it said (a C++ exception's message, Python's fatal error and innermost
    frame, else its last line)."""
    from advisor.trial.process import describe_exit

    said = ""
    try:
        with open(output, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - 64 * 1024))
            said = _last_words(fh.read().decode(errors="replace"))
    except OSError:
        pass
    return f"the estimating process ended without an estimate ({describe_exit(code)})" + (f": {said}" if said else "")


def _last_words(text: str) -> str:
    """The line of a dying process's output that says why.

    Example:
        >>> _last_words("terminate called after throwing an instance of 'c10::Error'\\n"
        ...             "  what():  Invalid thread pool!\\nException raised from ...\\n")
        'Invalid thread pool!'
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    said = next((line.split("what():", 1)[1].strip() for line in lines if line.startswith("what():")), "")
    if not said:
        fatal = next((i for i, line in enumerate(lines) if line.startswith("Fatal Python error:")), None)
        if fatal is not None:  # faulthandler's dump: the error, then the crashed thread's innermost frame
            frame = next((line for line in lines[fatal:] if line.startswith("File ")), "")
            said = lines[fatal] + (f" in {frame}" if frame else "")
        elif lines:
            said = lines[-1]
    return said[:300]


def over_limit(estimate: dict[str, Any], device: str, cap: int | None) -> str | None:
    """Why a configuration estimated at ``estimate`` cannot fit (``--memory-cap``, or the
    memory of each GPU / of this machine for all of its ranks), or None."""
    from advisor.core.units import fmt_bytes

    peak = estimate.get("peak_bytes")
    if not peak:
        return None
    ranks = estimate.get("world", 1)
    if cap is not None and peak > cap:
        return (f"estimated peak memory {fmt_bytes(peak)} per rank is over --memory-cap {fmt_bytes(cap)} "
                f"({estimate['how']}); not run")
    limit = device_memory(device)
    need = peak if device == "cuda" else peak * ranks  # a CPU trial's ranks share the machine's memory
    if limit is not None and need > limit:
        where = "each GPU's" if device == "cuda" else f"this machine's available memory for {ranks} rank(s)"
        return f"estimated peak memory {fmt_bytes(need)} is over {where} {fmt_bytes(limit)} ({estimate['how']}); not run"
    return None


def _forked(directory: Path, loaded: Loaded | None) -> Any:
    """The estimate in a fork of this warm trial process; it dies with it, and what model.py
    prints meanwhile goes nowhere."""
    from advisor.trial.process import ForkedChild, die_with_parent

    parent = os.getpid()

    def run() -> int:
        die_with_parent(parent)
        _output_into(directory / OUTPUT)
        return main(str(directory), loaded)

    return ForkedChild(run)


def _output_into(path: Path) -> None:
    """What model.py prints while it is estimated is not the trial's output: this process's
    stdout and stderr go to ``path`` (read only if it dies without an estimate), Python's
    streams too (the trial's may be a test runner's or a drain's stand-ins)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - this process's streams until it exits
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115


def main(directory: str, loaded: Loaded | None = None) -> int:
    """The child: estimate, write ``estimate.json`` (an estimate, or why there is none). A
    fatal signal leaves Python's traceback in its output (faulthandler)."""
    import faulthandler

    faulthandler.enable()
    path = Path(directory)
    payload = TrialPayload.from_dict(json.loads((path / "payload.json").read_text()))
    try:
        found = estimate_here(payload, loaded=loaded)
    except Exception as exc:  # noqa: BLE001 - any failure of the estimate is its reason, not the trial's
        found = {"unavailable": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}"}
    (path / "estimate.json").write_text(json.dumps(found))
    return 0


def estimate_here(payload: TrialPayload, fake: bool = True, loaded: Loaded | None = None) -> dict[str, Any]:
    """The estimate, in this process (which it leaves with a fake process group joined and
    left again, and the workload's model built on fake tensors: a throwaway process).
    ``fake=False`` runs the same steps on real tensors under the same tracker, for a
    configuration of one process (or a DDP rank's stand-in): the tensors' true peak, which
    the estimate is checked against."""
    from advisor.trial.single import load_same_workload
    from advisor.workload.contract import load_datasets

    config = payload.config
    workload = loaded.workload if loaded else load_same_workload(payload)
    train, _ = loaded.datasets if loaded else load_datasets(workload)
    run, world, ranks, how = _what_to_run(config)
    if not fake and world > 1:
        raise ValueError("real tensors are tracked in one process only: a configuration of one rank, or DDP's")
    rows = max(1, config.batch_size // config.data_ranks())  # the rank's batch (a smaller training set: all of it)
    per_rank, by_kind = {}, {}
    for rank in ranks:
        found = _one_rank(payload, workload, train, run, rank, world, rows, fake)
        per_rank[rank] = found["total"]
        by_kind.setdefault(rank, found["by_kind"])
    buckets = 0
    if config.parallelism == "ddp" and not config.ddp_bucket_view:
        buckets = by_kind[ranks[0]].get("parameters", 0)  # a flat bucket for every gradient
        per_rank = {r: v + buckets for r, v in per_rank.items()}
    return {"peak_bytes": max(per_rank.values()), "ranks": {str(r): v for r, v in per_rank.items()},
            "by_kind": by_kind[ranks[0]] | ({"ddp_buckets": buckets} if buckets else {}),
            "world": config.devices if config.parallelism != "single" else 1, "how": how, "method": METHOD}


def _what_to_run(config: TrialConfig) -> tuple[TrialConfig, int, list[int], str]:
    """The configuration to run on fake tensors, over how many ranks, which of them to
    estimate, and how (in words)."""
    # compile estimated eagerly; channels_last changes strides, not sizes (and a fake tensor
    # cannot be swapped for its channels-last copy)
    # fp16 as bf16: the same sizes, and fp16's loss scaler reads its overflow flag as a value
    # each step (``.item()``), which fake tensors have none of
    eager = config.replace(compile=False, compile_mode="default", compile_optimizer=False, channels_last=False,
                           precision="bf16" if config.precision == "fp16" else config.precision)
    note = (", eager" if config.compile else "") + (", fp16 as bf16" if config.precision == "fp16" else "")
    if config.parallelism == "ddp":
        single = eager.replace(parallelism="single", devices=1, batch_size=config.batch_size // config.devices,
                               **_DDP_ONLY)
        return single, 1, [0], f"a DDP rank: one process on its batch, plus gradient buckets{note}"
    if config.parallelism == "pp":
        return eager, config.devices, list(range(config.devices)), f"each pipeline stage on fake tensors{note}"
    if config.parallelism == "single":
        return eager, 1, [0], f"on fake tensors{note}"
    return eager, config.devices, [0], f"rank 0 of {config.devices} on fake tensors{note}"


def _one_rank(payload: TrialPayload, workload: Any, train: Any, config: TrialConfig, rank: int, world: int,
              rows: int, fake_tensors: bool = True) -> dict[str, Any]:
    """One rank's peak: joined to a fake process group as ``rank``, two steps on fake tensors."""
    import torch
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._pytree import tree_map_only
    from torch.utils.data import default_collate

    from advisor.techniques.model_parallel import MODEL_PARALLEL
    from advisor.techniques.prepare import apply
    from advisor.workload.contract import build_model
    from advisor.workload.splits import user_splits
    from advisor.workload.stream import first_items

    saved = {k: os.environ.get(k) for k in _RANK_ENV}
    if world > 1:
        import torch.testing._internal.distributed.fake_pg  # registers the "fake" backend
        from torch.testing._internal.distributed.fake_pg import FakeStore

        os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK="0")
        dist.init_process_group("fake", rank=rank, world_size=world, store=FakeStore())
    device = torch.device("cuda", 0) if payload.settings.device == "cuda" else torch.device("cpu")
    items = first_items(train, rows, f"{workload.where('datasets')}: the training stream")
    x, y = (workload.collate or default_collate)(items)
    try:
        with FakeTensorMode(allow_non_fake_inputs=True) if fake_tensors else contextlib.nullcontext() as mode:
            def fake(tree: Any) -> Any:
                return tree_map_only(torch.Tensor, mode.from_tensor, tree) if fake_tensors else tree

            torch.manual_seed(payload.settings.seed)
            model = build_model(workload)
            hints = user_splits(workload, model) if config.parallelism in MODEL_PARALLEL else {}
            if config.parallelism == "pp":
                hints["example_inputs"] = fake(x)  # the whole batch (the data is read outside fake mode)
            prepared = apply(model, config, device, workload=payload.settings.workload, **hints)
            del model
            optimizer = workload.optimizer(prepared.module.parameters())
            tracker = _tracker()
            tracker.track_external(prepared.module, optimizer)
            fx, fy = fake(x), fake(y)
            with tracker:
                for _ in range(2):
                    prepared.train_step(fx, fy, workload.loss, optimizer)
            snapshot = tracker.get_tracker_snapshot("peak")
    finally:
        if world > 1:
            dist.destroy_process_group()
            for k, v in saved.items():  # this process is a rank no longer
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    return _totals(snapshot)


def _tracker() -> Any:
    from torch.distributed._tools.mem_tracker import MemTracker

    class WholeStepTracker(MemTracker):
        """Device-wide peaks only: the per-module hooks are off (a pipeline stage runs once
        per micro-batch, which they refuse)."""

        def _pre_fw_hook(self, *args: Any) -> None:
            pass

        def _post_fw_hook(self, *args: Any) -> None:
            pass

        def _pre_bw_hook(self, *args: Any) -> None:
            pass

        def _post_bw_hook(self, *args: Any) -> None:
            pass

    return WholeStepTracker()


_KINDS = {"Parameter": "parameters", "Buffer": "buffers", "Gradient": "gradients", "Activation": "activations",
          "Temp": "temporary", "Optstate": "optimizer_state", "Input": "inputs"}


def _totals(snapshot: dict[Any, dict[Any, int]]) -> dict[str, Any]:
    """The peak snapshot of the busiest device: its total and the total by kind."""
    totals = [(per.get("Total", 0), per) for per in snapshot.values()]
    total, per = max(totals, key=lambda t: t[0]) if totals else (0, {})
    kinds = {_KINDS.get(getattr(k, "value", str(k)), str(getattr(k, "value", k))): int(v)
             for k, v in per.items() if k != "Total" and v}
    return {"total": int(total), "by_kind": kinds}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
