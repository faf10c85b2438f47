"""What the parts of a trial share (``advisor.trial.loop``, ``advisor.trial.training``):
the training batches epoch after epoch, the ranks' agreement on another step and on the
disturbed blocks, the noise sentinel's reading, the evaluation, a finite-loss check and the model's facts."""

from __future__ import annotations

import json
import math
import time
from typing import Any

from advisor.machine.sentinel import read_sentinel
from advisor.trial.errors import NonFiniteLoss
from advisor.workload.contract import Workload, check_metric
from advisor.workload.defaults import batch_len
from advisor.workload.stream import first_items, is_stream, start_epoch

_SENTINEL_ROUNDS = iter(range(1_000_000))
_DISTURBED_ROUNDS = iter(range(1_000_000))


def sentinel(prepared: Any) -> dict[str, Any] | None:
    """The sentinel's reading (rank 0 times it; None on the other ranks). The other ranks
    wait by sleeping on the process group's store, not in a collective, whose waiting can
    take CPU from the kernel being timed."""
    if prepared.ranks.world == 1:
        return read_sentinel(prepared.device)
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    key = f"advisor-sentinel-{next(_SENTINEL_ROUNDS)}"
    dist.barrier()
    store = distributed_c10d._get_default_store()
    if prepared.ranks.rank == 0:
        reading = read_sentinel(prepared.device)
        store.set(key, "done")
        return reading
    while not store.check([key]):
        time.sleep(0.002)
    return None


def share_disturbed(prepared: Any, timer: Any) -> None:
    """Every rank of a trial drops also the timed blocks that overlap a block another rank
    found disturbed (``advisor.machine.timing.StepTimer.note_elsewhere``): the ranks wait
    for each other in their collectives, so one rank's neighbour slows them all, and rank
    0's figure must not keep what rank 1 dropped. The windows travel through the process
    group's store (any backend, no device memory); every rank calls this at the same point."""
    if prepared.ranks.world == 1:
        return
    from torch.distributed import distributed_c10d

    store = distributed_c10d._get_default_store()
    round_ = next(_DISTURBED_ROUNDS)
    me, world = prepared.ranks.rank, prepared.ranks.world
    store.set(f"advisor-disturbed-{round_}-{me}", json.dumps(timer.disturbed_windows()))
    others: list[list[float]] = []  # as JSON brings them: [start, end] lists
    for rank in range(world):
        if rank != me:  # get waits until that rank has set its key
            others.extend(json.loads(store.get(f"advisor-disturbed-{round_}-{rank}")))
    timer.note_elsewhere(others)


def snapshot(module: Any) -> dict[str, Any]:
    return {k: v.detach().to("cpu", copy=True) for k, v in module.state_dict().items()}


def evaluate(prepared: Any, workload: Any, val: Any, batch_size: int | None = None) -> float:
    """The metric on the whole validation set, as the study's score: each batch's metric
    weighted by its samples, in batches of ``batch_size`` (the study's, the baseline's: the
    same for every trial) or the configuration's own (None, and always under pipeline
    parallelism, whose stages were built for it)."""
    import torch

    batch_size = None if prepared.step.pipeline is not None else batch_size
    prepared.model.eval()
    total, weighted = 0, 0.0
    if workload.validate is not None:  # a Lightning module's validation epoch
        with torch.inference_mode():
            value = workload.validate(prepared.predict, prepared.loader(val, per_rank=False, batch_size=batch_size,
                                                                        collate_fn=workload.collate))
        return workload.metric_spec.score(check_metric(workload, value))
    with torch.inference_mode():
        for x, y in prepared.loader(val, per_rank=False, collate_fn=workload.collate, batch_size=batch_size):
            out = prepared.predict(x)
            if out is None:  # a pipeline's earlier stage: the outputs come out of the last one
                continue
            n = batch_len(x, y)
            weighted += check_metric(workload, workload.metric(out, prepared.to_device(y))) * n
            total += n
    score = workload.metric_spec.score(weighted / total) if total else 0.0  # the study compares scores
    return score if prepared.step.pipeline is None else prepared.step.pipeline.from_last(score)


def model_hints(workload: Workload, model: Any, config: Any, train: Any) -> dict[str, Any]:
    """What ``apply`` needs besides the config for a model-parallel one: model.py's own
    ``tp_plan()`` / ``pipeline_split()`` (checked), and for a pipeline a batch to trace."""
    if config.parallelism not in ("tp", "fsdp_tp", "pp"):
        return {}
    from advisor.workload.splits import user_splits

    hints = user_splits(workload, model)
    if config.parallelism == "pp":
        if workload.validate is not None:
            from advisor.core.errors import UnsupportedError

            raise UnsupportedError("pipeline parallelism needs the model's forward alone; a Lightning file's step "
                                   "runs its training_step, loss included")
        from torch.utils.data import default_collate

        items = first_items(train, config.batch_size, f"{workload.where('datasets')}: the training stream")
        hints["example_inputs"] = (workload.collate or default_collate)(items)[0]
    return hints


def agree_more(prepared: Any, more: bool) -> bool:
    """All ranks take another step if any rank's timer wants one (collectives stay paired)."""
    if prepared.ranks.world == 1:
        return more
    import torch
    import torch.distributed as dist

    flag = torch.tensor([int(more)], device=prepared.device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def model_facts(prepared: Any) -> dict[str, Any]:
    from advisor.techniques.pruning import sparsity
    from advisor.techniques.quantization import quantized_layers

    try:
        facts = sparsity(prepared.module) | {"quantized_linear_layers": quantized_layers(prepared.module)}
    except Exception as exc:  # an exotic tensor subclass: report what we can
        facts = {"error": f"{type(exc).__name__}: {exc}"[:200]}
    return facts | prepared.stats


def check_batch_fits(batch: int, train: Any) -> None:
    """A batch larger than a map-style training set cannot run (a stream's length shows
    when a pass ends: ``cycle``)."""
    from advisor.core.errors import UnsupportedError

    if not is_stream(train) and batch > len(train):
        raise UnsupportedError(f"batch size {batch} is larger than the training set ({len(train)} samples)")


def training_batches(prepared: Any, workload: Workload, train: Any, seed: int) -> Any:
    """The training batches, epoch after epoch (the workload told at each epoch's end); a
    stream is read again from its start at each epoch (``advisor.workload.stream``)."""
    loader = prepared.loader(train, shuffle=True, seed=seed, drop_last=True, collate_fn=workload.collate)
    return cycle(loader, workload.epoch_end)


def cycle(loader: Any, epoch_end: Any = None) -> Any:
    """The loader's batches, pass after pass; a pass that gives no batch at all is an
    UnsupportedError (a stream shorter than one batch: it would be started again forever)."""
    epoch = 0
    while True:
        start_epoch(loader, epoch)
        batches = 0
        for batch in loader:
            batches += 1
            yield batch
        if not batches:
            raise _no_batch(loader)
        if epoch_end is not None:  # when the next epoch's first batch is asked for
            epoch_end(epoch)
        epoch += 1


def _no_batch(loader: Any) -> Exception:
    from advisor.core.errors import UnsupportedError

    data = loader.dataset
    if hasattr(data, "describe"):  # a stream (advisor.workload.stream.StreamShard)
        return UnsupportedError(f"batch size {loader.batch_size} per rank is larger than one pass of the training "
                                f"stream ({data.describe()}): the pass ended before one full batch")
    return UnsupportedError(f"a whole pass over the data ({len(data)} samples) gave no full batch of "
                            f"{loader.batch_size} samples per rank")


def check_finite(loss: Any, step: int) -> None:
    value = float(loss)
    if not math.isfinite(value):
        raise NonFiniteLoss(f"loss became {value} at step {step}: this configuration diverged")
