"""A training set that is a stream (an IterableDataset): accepted by the contract and the
preflight, never measured or indexed; bad streams refused before any study with exit
status 2; the loader's split of a stream among data-parallel ranks and DataLoader workers."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import IterableDataset, get_worker_info

from advisor.core.config import TrialConfig
from advisor.core.errors import WorkloadError
from advisor.search.space import filter_space, load_space
from advisor.techniques.prepare import apply
from advisor.workload.contract import load_datasets, load_workload
from advisor.workload.preflight import preflight
from advisor.workload.stream import first_items, is_stream, shards_by_worker, stream_shard

from conftest import WORKLOADS, exit_status, write_model
from declared import cpu_node

STREAMING = WORKLOADS / "streaming.py"


def _ids(data):
    return [int(x) for x, _ in data]


class Numbers(IterableDataset):
    """0, 1, ..., n-1 as (input, target) items."""

    def __init__(self, n, shards=False):
        self.n, self.shards = n, shards

    def __iter__(self):
        info = get_worker_info() if self.shards else None
        start, step = (info.id, info.num_workers) if info is not None else (0, 1)
        return iter([(torch.tensor(float(i)), i) for i in range(start, self.n, step)])


def test_the_preflight_accepts_a_stream_and_reports_no_size():
    facts = preflight(load_workload(STREAMING))
    assert facts["train_size"] is None and facts["val_size"] == 256
    assert facts["train_stream"] is True and facts["stream_shards_workers"] is False


def test_a_map_style_set_is_no_stream():
    assert not is_stream([(1, 2)]) and not is_stream(torch.utils.data.TensorDataset(torch.zeros(2)))
    assert is_stream(Numbers(3)) and is_stream(iter([]))
    facts = preflight(load_workload(WORKLOADS / "regression.py"))
    assert facts["train_size"] == 512 and facts["train_stream"] is False and "stream_shards_workers" not in facts


def test_reading_the_stream_the_preflight_does_not_use_up_the_trials_data():
    workload = load_workload(STREAMING)
    train, _ = load_datasets(workload)
    once, again = first_items(train, 3), first_items(train, 3)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(once, again))  # every pass starts the stream again
    assert workload.module.READ["passes"] == 3  # load_datasets' check, then the two reads


STREAM_MODEL = '''
import torch
from torch import nn
from torch.utils.data import IterableDataset, TensorDataset

BASELINE = {{"batch_size": 8}}


class Stream(IterableDataset):
    def __iter__(self):
        return iter([(torch.randn(4), 0) for _ in range({items})])


def model():
    return nn.Linear(4, 2)


def datasets():
    {datasets}
'''

VALIDATION = "TensorDataset(torch.zeros(8, 4), torch.zeros(8, dtype=torch.long))"

NOT_PAIRS = "\n\nclass Stream2(IterableDataset):\n    def __iter__(self):\n        return iter([torch.zeros(4)] * 3)\n"

# (id, items a pass, what datasets() returns, what the message must say)
BAD = [
    ("empty-stream", 0, f"return Stream(), {VALIDATION}",
     "the training set is a stream (Stream) that yielded nothing: its first pass (iter()) ended before one item"),
    ("generator", 10, f"return (x for x in Stream()), {VALIDATION}",
     "the training set is a generator, which can be read only once"),
    ("stream-validation", 10, "return Stream(), Stream()",
     "the validation set must be map-style (with __len__ and __getitem__), found a stream (Stream)"),
    ("shorter-than-baseline-batch", 5, f"return Stream(), {VALIDATION}",
     "BASELINE batch_size 8 is larger than one pass of the training stream (Stream, from datasets(): it ended "
     "after 5 samples); expected at most 5"),
    ("not-pairs", 10, f"return Stream2(), {VALIDATION}",
     "the training stream's item 0 must be an (input, target) pair, found Tensor"),
]


@pytest.mark.parametrize("name, items, body, message", BAD, ids=[b[0] for b in BAD])
def test_a_bad_stream_exits_2_before_any_study(tmp_path, workdir, capsys, name, items, body, message):
    path = write_model(tmp_path, STREAM_MODEL.format(items=items, datasets=body) + NOT_PAIRS)
    assert exit_status(["tune", str(path), "--no-tui", "--trials", "2", "--train-samples", "64"]) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert str(path) in err
    assert sorted(p.name for p in workdir.iterdir()) == ["model.py"]  # no study, no storage file


def test_a_stream_without_train_samples_is_refused_naming_the_flag(tmp_path, workdir, capsys):
    assert exit_status(["tune", str(STREAMING), "--no-tui", "--trials", "2"]) == 2
    err = capsys.readouterr().err
    assert "the training set is a stream (no length to count 5 epochs of)" in err and "--train-samples N" in err
    assert not list(workdir.glob("*.db"))


def test_a_stream_raising_shows_the_users_frames(tmp_path):
    path = write_model(tmp_path, STREAM_MODEL.format(items=10, datasets=f"return Broken(), {VALIDATION}")
                       + "\n\nclass Broken(IterableDataset):\n    def __iter__(self):\n"
                         "        raise OSError('shard 3 is missing')\n        yield\n")
    with pytest.raises(WorkloadError) as caught:
        preflight(load_workload(path))
    text = str(caught.value)
    assert "datasets(): the training stream (Broken), started with iter(), raised OSError: shard 3 is missing" in text
    assert f'{path}", line' in text and "advisor/workload" not in text


def test_a_stream_that_shards_itself_among_workers_is_told_apart():
    assert shards_by_worker(Numbers(10, shards=True)) is True
    assert shards_by_worker(Numbers(10)) is False
    assert get_worker_info() is None  # put back


def test_loader_workers_above_one_are_dropped_for_a_stream_that_does_not_shard_itself():
    space = load_space("default")  # num_workers 0 or 2
    facts = {"train_size": None, "train_stream": True, "stream_shards_workers": False}
    kept = filter_space(space, cpu_node(), facts)
    workers = next(k for k in kept.knobs if k.name == "num_workers")
    assert workers.choices == (0,)
    reasons = [d.reason for d in kept.dropped if d.knob == "num_workers"]
    assert reasons and all("does not shard itself among DataLoader workers" in r for r in reasons)
    sharding = filter_space(space, cpu_node(), facts | {"stream_shards_workers": True})
    assert not [d for d in sharding.dropped if d.knob == "num_workers"]


def test_ranks_split_a_stream_into_disjoint_equal_shares():
    ranks = [_ids(stream_shard(Numbers(11), rank=r, world=3)) for r in range(3)]
    assert ranks == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]  # whole rounds: the last 2 items are left


@pytest.mark.parametrize("shards", [False, True], ids=["stream-whole", "stream-shards-itself"])
def test_loader_workers_read_each_item_once(shards):
    """Two workers over a stream: each item once (a stream that does not shard itself is
    kept to alternate batches per worker; one that does is left to it)."""
    prepared = apply(torch.nn.Linear(1, 1), {"batch_size": 4, "num_workers": 2}, "cpu")
    loader = prepared.loader(Numbers(40, shards=shards), shuffle=True, drop_last=True)
    seen = [int(i) for _, y in loader for i in y]
    assert sorted(seen) == list(range(40))
    if not shards:  # the same batches, in the same order, as without workers
        assert seen == list(range(40))


def test_an_infinite_stream_is_read_lazily():
    class Endless(IterableDataset):
        def __iter__(self):
            i = 0
            while True:
                yield torch.tensor(float(i)), i
                i += 1

    prepared = apply(torch.nn.Linear(1, 1), TrialConfig(batch_size=8), "cpu")
    first = next(iter(prepared.loader(Endless())))
    assert first[1].tolist() == list(range(8))
