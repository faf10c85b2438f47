"""Streaming training sets: a training set read as a stream (a
``torch.utils.data.IterableDataset``, or any iterable without ``__len__`` and
``__getitem__``), never measured or indexed.

Each pass starts the stream again with ``iter()``; a trial reads as many passes as its
sample budget needs (an infinite stream: one). Its order is the stream's own (no shuffle:
there is no sampler). Data-parallel ranks split it as torch's ``DistributedSampler``
splits the indices of a map-style set without shuffling: rank ``r`` of ``W`` takes items
``r, r + W, r + 2W, ...``, in whole rounds of ``W`` items, so every rank reads as many
items per pass and the ranks' epochs end together. DataLoader workers: a stream that
shards itself among them (it reads ``torch.utils.data.get_worker_info()``'s ``id`` or
``num_workers``, as Hugging Face datasets' streams do) is left to do so; one that does not
would be read whole by every worker, so ``StreamShard`` keeps worker ``w`` of ``K`` to
the batches ``w, w + K, ...`` of the stream (the batches the DataLoader hands out in turn:
the same batches, in the same order, as without workers; each worker still reads the
whole stream, which is why a study drops ``num_workers`` above 1 for such a stream).
"""

from __future__ import annotations

import functools
import itertools
from typing import Any, Iterator

from advisor.core.errors import WorkloadError
from advisor.workload.user_code import user_code


def is_stream(data: Any) -> bool:
    """Whether ``data`` is read as a stream: an IterableDataset, or an iterable that cannot
    be measured and indexed (a map-style set has ``__len__`` and ``__getitem__``)."""
    if _is_iterable_dataset(data):
        return True
    return hasattr(data, "__iter__") and not (hasattr(data, "__len__") and hasattr(data, "__getitem__"))


def _is_iterable_dataset(data: Any) -> bool:
    import sys

    torch_data = sys.modules.get("torch.utils.data")  # no torch imported: not a torch dataset
    return torch_data is not None and isinstance(data, torch_data.IterableDataset)


def check_stream(data: Any, where: str, role: str) -> None:
    """A stream must start again when ``iter()`` is called on it (every trial, every epoch):
    an iterator or a generator is read once."""
    if iter_is_self(data):
        raise WorkloadError(
            f"{where}: the {role} set is {_a(type(data).__name__)}, which can be read only once; expected a dataset "
            "every trial can read from its start: an IterableDataset whose __iter__ starts the stream again "
            "(for a generator function gen: class Stream(IterableDataset): def __iter__(self): return gen())")


def iter_is_self(data: Any) -> bool:
    return hasattr(data, "__next__") and callable(getattr(data, "__iter__", None)) and iter(data) is data


def first_items(data: Any, n: int, where: str = "") -> list[Any]:
    """Up to ``n`` items: a map-style set's first by index (its ``__len__`` and
    ``__getitem__`` are model.py's code too), a stream's first of one pass (started with
    ``iter()``); what the user's code raises shows in its own frames, named by ``where``."""
    if not is_stream(data):
        with user_code(f"{where or 'the dataset'}, reading its items by index,"):
            return [data[i] for i in range(min(n, len(data)))]
    with user_code(where or "the training stream"):
        return list(itertools.islice(iter(data), n))


def count_up_to(data: Any, n: int, where: str) -> int:
    """How many items one pass of the stream ``data`` gives, counting no further than ``n``."""
    with user_code(where):
        return sum(1 for _ in itertools.islice(iter(data), n))


def shards_by_worker(data: Any, where: str = "") -> bool:
    """Whether the stream divides itself among DataLoader workers: it is started (one item
    read) as worker 0 of 2 would start it, and it reads the worker's ``id`` or
    ``num_workers`` from ``get_worker_info()``. (``torch.utils.data._utils.worker._worker_info``,
    what ``get_worker_info()`` returns, is set for that moment; torch 2.13.)"""
    try:
        from torch.utils.data._utils import worker
    except ImportError:  # torch moved it: assume the stream does not shard (the safe side)
        return False
    seen: list[str] = []

    def watched(self: Any, name: str) -> Any:
        if name in ("id", "num_workers"):
            seen.append(name)
        return object.__getattribute__(self, name)

    try:
        info = type("WatchedWorkerInfo", (worker.WorkerInfo,), {"__getattribute__": watched})(
            id=0, num_workers=2, seed=0, dataset=data)
    except TypeError:
        return False
    saved = worker._worker_info
    worker._worker_info = info
    try:
        with user_code(where or "the training stream, started as DataLoader worker 0 of 2,"):
            next(iter(data), None)
    finally:
        worker._worker_info = saved
    return bool(seen)


def stream_shard(stream: Any, *, rank: int = 0, world: int = 1, batch: int = 1, split_workers: bool = True) -> Any:
    """``stream`` as data-parallel rank ``rank`` of ``world`` reads it (an IterableDataset
    for a DataLoader of ``batch`` items a batch); ``split_workers``: keep each DataLoader
    worker to its own batches (for a stream that does not shard itself among workers)."""
    return _shard_class()(stream, rank, world, batch, split_workers)


def start_epoch(loader: Any, epoch: int) -> None:
    """Before pass ``epoch`` of a DataLoader: a distributed sampler's new shuffle, a stream's
    ``set_epoch`` (Hugging Face datasets' streams reshuffle their buffer with it)."""
    if hasattr(loader.sampler, "set_epoch"):
        loader.sampler.set_epoch(epoch)
    if isinstance(loader.dataset, _shard_class()):
        loader.dataset.set_epoch(epoch)


def __getattr__(name: str) -> Any:
    if name == "StreamShard":  # built on first use (torch is not imported at this module's top level)
        return _shard_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _shard_class() -> type:
    from torch.utils.data import IterableDataset, get_worker_info

    class StreamShard(IterableDataset):
        """A stream as one data-parallel rank and one DataLoader worker read it."""

        def __init__(self, stream: Any, rank: int, world: int, batch: int, split_workers: bool) -> None:
            self.stream, self.rank, self.world = stream, rank, world
            self.batch, self.split_workers = max(1, batch), split_workers

        def __iter__(self) -> Iterator[Any]:
            items: Iterator[Any] = iter(self.stream)
            if self.world > 1:
                items = _every(items, self.rank, self.world)
            info = get_worker_info()
            if self.split_workers and info is not None and info.num_workers > 1:
                items = _batches_of(items, info.id, info.num_workers, self.batch)
            return items

        def set_epoch(self, epoch: int) -> None:
            if callable(getattr(self.stream, "set_epoch", None)):
                self.stream.set_epoch(epoch)

        def describe(self) -> str:
            return type(self.stream).__name__ + (f", split among {self.world} ranks" if self.world > 1 else "")

    StreamShard.__module__, StreamShard.__qualname__ = __name__, "StreamShard"  # pickled by name (spawned workers)
    return StreamShard


def _every(items: Iterator[Any], rank: int, world: int) -> Iterator[Any]:
    """Item ``rank`` of each whole round of ``world`` items (an incomplete last round is left)."""
    while len(round_ := list(itertools.islice(items, world))) == world:
        yield round_[rank]


def _batches_of(items: Iterator[Any], worker: int, workers: int, size: int) -> Iterator[Any]:
    """The items of batches ``worker, worker + workers, ...`` (``size`` items each)."""
    for index in itertools.count():
        chunk = list(itertools.islice(items, size))
        if not chunk:
            return
        if index % workers == worker:
            yield from chunk


def _a(name: str) -> str:
    return ("an " if name[:1].lower() in "aeiou" else "a ") + name
