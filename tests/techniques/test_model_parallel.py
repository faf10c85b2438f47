"""Tensor, pipeline and 2-D parallelism through ``advisor.apply()`` over real gloo ranks on
this CPU: each trains like one process (same seed, same batches: the same losses within
float rounding) and predicts what one process predicts; the rules that keep other knobs
away from them say why; and a real trial of each runs its ranks as processes."""

from __future__ import annotations

import json
import os
import socket

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from advisor import apply
from advisor.core.config import TrialConfig
from advisor.core.errors import UnsupportedError
from advisor.techniques.pipeline import balance
from advisor.techniques.rules import conflicts, refusal

VOCAB, WIDTH, HEADS, LAYERS, CONTEXT, BATCH = 32, 16, 4, 4, 8, 8
STEPS, LR = 4, 0.05


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.num_heads = HEADS
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(WIDTH, WIDTH) for _ in range(3))
        self.out_proj = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = (p(x).view(b, t, self.num_heads, -1).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out_proj(y.transpose(1, 2).reshape(b, t, -1))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.attn = Attention()
        self.up, self.down = nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class TinyLM(nn.Module):
    """Four blocks of attention (separate q/k/v) and MLP: every strategy can split it."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm, self.head = nn.LayerNorm(WIDTH), nn.Linear(WIDTH, VOCAB)

    def forward(self, idx):
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def lm_loss(out, y):
    return F.cross_entropy(out.reshape(-1, VOCAB), y.reshape(-1))


def batches():
    gen = torch.Generator().manual_seed(1)
    data = torch.randint(0, VOCAB, (STEPS, BATCH, CONTEXT + 1), generator=gen)
    return [(d[:, :-1], d[:, 1:]) for d in data]


def held_out():  # 6 windows: smaller than a training batch (a pipeline pads and cuts back)
    return torch.randint(0, VOCAB, (6, CONTEXT), generator=torch.Generator().manual_seed(2))


def train(config, rows=slice(None), **hints):
    torch.manual_seed(0)
    prepared = apply(TinyLM(), config, "cpu", **hints)
    optimizer = torch.optim.SGD(prepared.module.parameters(), lr=LR, momentum=0.9)
    losses = [float(prepared.train_step(x[rows], y[rows], lm_loss, optimizer)) for x, y in batches()]
    prepared.model.eval()
    with torch.inference_mode():
        out = prepared.predict(held_out())
    return prepared, losses, (out.tolist() if out is not None else None)


CONFIGS = {
    "tp": {"parallelism": "tp", "devices": 2},
    "pp-1f1b": {"parallelism": "pp", "devices": 2},
    "pp-gpipe-4-time": {"parallelism": "pp", "devices": 2, "pp_schedule": "gpipe", "pp_microbatches": 4,
                        "pp_balance": "time"},
    "pp-interleaved": {"parallelism": "pp", "devices": 2, "pp_schedule": "interleaved_1f1b", "pp_microbatches": 4},
    "fsdp_tp": {"parallelism": "fsdp_tp", "devices": 4, "tp_size": 2},
    "pp-bf16": {"parallelism": "pp", "devices": 2, "precision": "bf16", "pp_microbatches": 4},
}
# the bf16 pipeline is cut inside a block: what crosses is the MLP's bf16 hidden activation
# (a block's output is fp32 under autocast: its residual sum keeps the fp32 input's type)
SPLITS = {"pp-bf16": ["blocks.1.down"]}


def _rank(rank: int, world: int, port: int, names: list[str], out: str) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    found = {}
    for name in names:
        config = {"batch_size": BATCH, **CONFIGS[name]}
        example = batches()[0][0] if config["parallelism"] == "pp" else None
        share = BATCH // TrialConfig(**config).data_ranks()
        group = rank // config.get("tp_size", world)  # ranks next to each other share a TP group
        prepared, losses, predicted = train(config, slice(group * share, (group + 1) * share), example_inputs=example,
                                            pipeline_split=SPLITS.get(name))
        assert prepared.dp_rank == group
        found[name] = {"losses": losses, "predicted": predicted, "reports": prepared.reports,
                       "dp_rank": prepared.dp_rank, "stats": {k: v for k, v in prepared.stats.items()
                                                              if k in ("tp_plan", "pipeline")},
                       "shard": list(prepared.module.blocks[0].up.weight.to_local().shape) if name == "tp" else None}
    with open(f"{out}.{rank}", "w") as fh:
        json.dump(found, fh)
    dist.barrier()
    os._exit(0)  # as advisor's ranks leave: gloo's teardown can abort a finished process


def spawn(tmp_path, world: int, names: list[str]) -> list[dict]:
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # forks of this process, as a trial's ranks are forks of the trial's: no interpreter start
    # and torch import per rank (about 1.5 s of CPU each here); each rank sets one thread
    # before its first operation, so no OpenMP pool crosses the fork
    mp.start_processes(_rank, args=(world, port, names, str(tmp_path / "rank")), nprocs=world, join=True,
                       start_method="fork")
    return [json.loads((tmp_path / f"rank.{r}").read_text()) for r in range(world)]


@pytest.fixture(scope="module")
def one_process():
    _, losses, predicted = train({"batch_size": BATCH})
    return losses, predicted


def test_tensor_and_pipeline_parallel_ranks_train_and_predict_like_one_process(tmp_path, one_process):
    """Two gloo ranks, one process group, each strategy in turn. Losses match one process's
    to 1e-5 relative: not bit for bit, since the ranks add partial sums (TP's row-wise
    all-reduce) or run micro-batches (PP) in another order of float32 additions than one
    process's matmuls, a few ulps a step, which four momentum-SGD steps cannot grow past that."""
    losses, predicted = one_process
    names = ["tp", "pp-1f1b", "pp-gpipe-4-time", "pp-interleaved"]
    ranks = spawn(tmp_path, 2, names)
    assert losses[-1] < losses[0]
    for name in names:
        for rank in ranks:
            assert rank[name]["losses"] == pytest.approx(losses, rel=1e-5, abs=1e-6), (name, rank[name]["losses"])
        reporting = [r for r in ranks if r[name]["reports"]]
        assert len(reporting) == 1
        assert torch.allclose(torch.tensor(reporting[0][name]["predicted"]), torch.tensor(predicted), atol=1e-5)
    tp = ranks[0]["tp"]
    assert tp["shard"] == [32, 16]  # each rank holds half of the MLP's 64 hidden units
    assert tp["stats"]["tp_plan"]["split_layers"] == 6 * LAYERS and tp["stats"]["tp_plan"]["heads"] == {
        f"blocks.{i}.attn.num_heads": HEADS // 2 for i in range(LAYERS)}
    assert ranks[1]["pp-1f1b"]["reports"] and not ranks[0]["pp-1f1b"]["reports"]  # outputs come out of the last stage
    assert ranks[1]["pp-1f1b"]["predicted"] is not None and ranks[0]["pp-1f1b"]["predicted"] is None
    assert ranks[0]["pp-1f1b"]["stats"]["pipeline"]["cuts"] == ["blocks.2"]  # two blocks a stage, by parameters
    interleaved = ranks[0]["pp-interleaved"]["stats"]["pipeline"]
    assert interleaved["stages"] == 4 and interleaved["cuts"] == ["blocks.1", "blocks.2", "blocks.3"]
    assert len(interleaved["stage_parameters"]) == 2  # rank 0 runs stages 0 and 2


def test_a_pipeline_under_bf16_autocast_trains_like_one_process(tmp_path):
    """Stages are traced in fp32 and run under autocast: a stage's bf16 outputs crossed into
    buffers the next stage sized for fp32, and the loss was nan at the first step (found by
    benchmarks/combinations.py on the encoder). They are sent as traced; the losses are one
    bf16 process's, up to where bf16 rounding falls (boundaries carried in fp32)."""
    _, losses, _ = train({"batch_size": BATCH, "precision": "bf16"})
    ranks = spawn(tmp_path, 2, ["pp-bf16"])
    assert ranks[0]["pp-bf16"]["stats"]["pipeline"]["cuts"] == ["blocks.1.down"]
    for rank in ranks:
        assert rank["pp-bf16"]["losses"] == pytest.approx(losses, rel=2e-2), rank["pp-bf16"]["losses"]


def test_fsdp_over_tensor_parallel_groups_trains_like_one_process(tmp_path, one_process):
    """Four gloo ranks on a 2 x 2 mesh: FSDP2 across two groups, each splitting the model
    over two TP ranks and training on half the batch; the mean of the two groups' losses is
    the whole batch's loss, as in one process."""
    losses, predicted = one_process
    ranks = spawn(tmp_path, 4, ["fsdp_tp"])
    groups = {r["fsdp_tp"]["dp_rank"]: r["fsdp_tp"]["losses"] for r in ranks}
    assert sorted(groups) == [0, 1] and [r["fsdp_tp"]["dp_rank"] for r in ranks] == [0, 0, 1, 1]
    mean = [(a + b) / 2 for a, b in zip(groups[0], groups[1])]
    assert mean == pytest.approx(losses, rel=1e-5, abs=1e-6)
    assert torch.allclose(torch.tensor(ranks[0]["fsdp_tp"]["predicted"]), torch.tensor(predicted), atol=1e-5)


def test_balance_minimises_the_heaviest_stage():
    assert balance([1, 1, 1, 3], 2) == [3]
    assert balance([4, 1, 1, 1, 1], 2) == [1]
    assert balance([1, 2, 3, 4, 5, 6], 3) == [3, 5]  # 6 | 4+5 | 6 ... the heaviest part is 9 at best
    assert balance([1.0] * 4, 4) == [1, 2, 3]


@pytest.mark.parametrize("config, text", [
    ({"parallelism": "tp", "devices": 2, "pruning": "l1_unstructured"}, "pruning masks are whole-weight tensors"),
    ({"parallelism": "pp", "devices": 2, "quantization": "qat_int8"}, "swaps Linear layers"),
    ({"parallelism": "pp", "devices": 2, "compile": True}, "advisor does not compile them"),
    ({"parallelism": "pp", "devices": 2, "activation_checkpointing": True}, "traced graphs"),
    ({"parallelism": "pp", "devices": 2, "grad_accumulation": 2}, "raise pp_microbatches instead"),
    ({"parallelism": "pp", "devices": 2, "channels_last": True}, "channels_last"),
    ({"parallelism": "tp", "devices": 2, "precision": "fp16"}, "use bf16"),
    # found by benchmarks/combinations.py: "aten._fused_adamw_.default got mixed torch.Tensor and DTensor"
    ({"parallelism": "tp", "devices": 2, "fused_optimizer": True}, "the kernel refuses the mix"),
    ({"parallelism": "fsdp_tp", "devices": 4}, "needs tp_size >= 2"),
    ({"parallelism": "fsdp_tp", "devices": 6, "tp_size": 4}, "must be a multiple of tp_size"),
    ({"parallelism": "pp", "devices": 2, "pp_microbatches": 3, "batch_size": 64}, "pp_microbatches=3"),
    ({"parallelism": "pp", "devices": 4, "pp_schedule": "interleaved_1f1b", "pp_microbatches": 9, "batch_size": 72},
     "multiple of the rounds"),
    ({"parallelism": "ddp", "devices": 2, "pp_schedule": "gpipe"}, "applies to pipeline parallelism"),
    ({"parallelism": "fsdp", "devices": 2, "tp_size": 2}, "applies to FSDP on a 2-D mesh"),
])
def test_combinations_that_cannot_work_are_rules_with_reasons(config, text):
    assert text in conflicts(TrialConfig(**{"batch_size": 64, **config}))


def test_the_batch_splits_between_data_parallel_groups_only():
    assert refusal(TrialConfig(parallelism="tp", devices=2, batch_size=3), "train") is None  # one group
    assert "2 data-parallel groups" in refusal(TrialConfig(parallelism="fsdp_tp", devices=4, tp_size=2,
                                                           batch_size=3), "train")
    assert TrialConfig(parallelism="pp", devices=4).data_ranks() == 1


def test_a_model_with_too_few_units_for_the_stages_is_refused():
    with pytest.raises(UnsupportedError, match="needs at least 4 units"):
        apply(nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)),
              {"parallelism": "pp", "devices": 2, "pp_schedule": "interleaved_1f1b", "batch_size": 8}, "cpu")
