"""Model parallelism inside one trial: tensor parallelism (``tp``: each Linear pair split
over the ranks by ``parallelize_module``, the plan from ``advisor.workload.tp_plan``),
FSDP2 over tensor-parallel groups on a 2-D ``DeviceMesh`` (``fsdp_tp``), and the rules that
say which other knobs cannot go with them. Pipeline parallelism (``pp``) is
``advisor.techniques.pipeline``; ``advisor.techniques.parallelism`` joins the process group
and hands each strategy the prepared model.

Under TP every rank of a group sees the whole batch (the group computes one model); on a
2-D mesh the batch is split between the ``devices / tp_size`` FSDP groups.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from advisor.core.config import TrialConfig
from advisor.core.errors import UnsupportedError
from advisor.workload.tp_plan import STYLES

if TYPE_CHECKING:
    from advisor.techniques.prepared import Prepared
    from advisor.workload.tp_plan import TpPlan

TP_STRATEGIES = ("tp", "fsdp_tp")
MODEL_PARALLEL = ("tp", "fsdp_tp", "pp")


def model_parallel_conflict(c: TrialConfig) -> str | None:
    """Why a tensor- or pipeline-parallel config cannot combine its knobs, or None."""
    if c.parallelism not in MODEL_PARALLEL:
        return None
    if c.parallelism == "fsdp_tp":
        if c.tp_size < 2:
            return "fsdp_tp needs tp_size >= 2 ranks in each tensor-parallel group (tp_size=1 is plain fsdp)"
        if c.devices % c.tp_size or c.devices // c.tp_size < 2:
            return (f"fsdp_tp lays devices={c.devices} out as a 2-D mesh of FSDP groups x tp_size={c.tp_size}: "
                    "devices must be a multiple of tp_size with at least 2 groups (else use tp)")
    if c.pruning != "none":
        return (f"pruning masks are whole-weight tensors kept beside each layer; {_name(c)} replaces the layers' "
                "weights with shards (or traced stages) the masks no longer match")
    if c.quantization != "none":
        return (f"quantization={c.quantization} swaps Linear layers for torchao's; {_name(c)} splits plain Linear "
                "layers only (fp8 under TP needs torchao's float8 parallel styles, not applied here)")
    if c.precision == "fp16":
        return f"fp16's gradient scaler is not set up for {_name(c)}; use bf16"
    if c.parallelism == "tp" and c.fused_optimizer:
        return ("torch's fused optimizer kernel updates every parameter in one call, and under tp only the split "
                "layers' parameters are DTensors, the rest plain tensors: the kernel refuses the mix (under fsdp_tp "
                "every parameter is a DTensor and it runs)")
    if c.parallelism == "fsdp_tp" and c.channels_last:
        return "FSDP shards only contiguous parameters; channels_last weights are not (torch 2.13)"
    if c.parallelism == "pp":
        return _pipeline_conflict(c)
    return None


def _pipeline_conflict(c: TrialConfig) -> str | None:
    if c.grad_accumulation > 1:
        return ("the pipeline already runs the batch in pp_microbatches micro-batches; gradient accumulation on top "
                "of it only adds steps: raise pp_microbatches instead")
    if c.compile:
        return ("a pipeline's stages are graphs traced by torch.export and run by the schedule, stage by stage; "
                "advisor does not compile them (compile the stages yourself, or use compile without pp)")
    if c.activation_checkpointing:
        return ("a pipeline's stages are traced graphs (torch.export) in which the model's blocks are no longer "
                "modules to wrap; activation checkpointing needs them (the schedule's micro-batches bound the "
                "activations instead)")
    if c.channels_last:
        return "channels_last converts the model's 4-D inputs and weights, which a traced pipeline stage has fixed"
    microbatches = c.pp_microbatches or pipeline_stages(c)
    if c.batch_size % microbatches:
        return f"batch_size {c.batch_size} does not split evenly into pp_microbatches={microbatches} micro-batches"
    rounds = max(1, microbatches // c.devices)
    if c.pp_schedule == "interleaved_1f1b" and microbatches % rounds:
        return (f"interleaved 1F1B runs its micro-batches in {rounds} rounds (pp_microbatches // devices): "
                f"pp_microbatches={microbatches} must be a multiple of the rounds")
    return None


def pipeline_stages(c: TrialConfig) -> int:
    """How many stages a pipeline config cuts the model into: one per rank, two per rank
    for the interleaved schedule (each rank runs two stages, a loop apart)."""
    return c.devices * (2 if c.pp_schedule == "interleaved_1f1b" else 1)


def _name(c: TrialConfig) -> str:
    return {"tp": "tensor parallelism", "fsdp_tp": "fsdp_tp (FSDP over tensor-parallel groups)",
            "pp": "pipeline parallelism"}[c.parallelism]


def tensor_parallel(prepared: Prepared, tp_size: int, mesh: Any) -> None:
    """Split ``prepared.module`` over the ranks of ``mesh`` (1-D, ``tp_size`` ranks) with the
    plan the model calls for: the user's ``tp_plan()``, a transformers model's own, or one
    derived from its layers; a model with nothing to split is refused with the reason."""
    from advisor.workload.tp_plan import plan_for, refusal

    plan = plan_for(prepared.module, tp_size, prepared.hints.get("tp_plan"))
    if not plan.styles:
        raise UnsupportedError(refusal(prepared.module, tp_size, prepared.hints.get("tp_plan")) or "no TP plan")
    parallelize(prepared.module, plan, mesh)
    prepared.stats["tp_plan"] = {"source": plan.source, "split_layers": len(plan.styles),
                                 "heads": dict(plan.heads), "left_whole": plan.skipped[:8]}


def device_mesh(device_type: str, shape: tuple[int, ...], names: tuple[str, ...]) -> Any:
    """``init_device_mesh``, with real tensors even while a memory estimate runs the model on
    fake ones (``advisor.trial.estimate``): the mesh reads its rank layout as numbers."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.distributed.device_mesh import init_device_mesh

    with unset_fake_temporarily():
        return init_device_mesh(device_type, shape, mesh_dim_names=names)


def apply_tp(prepared: Prepared) -> None:
    """``parallelism: tp``: one tensor-parallel group of every rank; each sees the whole batch."""
    mesh = device_mesh(prepared.device.type, (prepared.ranks.world,), ("tp",))
    tensor_parallel(prepared, prepared.ranks.world, mesh)
    prepared.ranks = replace(prepared.ranks, dp_rank=0, dp_world=1)


def apply_fsdp_tp(prepared: Prepared, shard: Any) -> None:
    """``parallelism: fsdp_tp``: a 2-D mesh of ``devices / tp_size`` FSDP groups x ``tp_size``
    TP ranks (ranks next to each other share a TP group, the faster links on a node): TP
    inside each group first, then FSDP2 across the groups (``shard``: parallelism's
    ``fully_shard`` of the blocks and the root, given the mesh's FSDP dimension)."""
    tp = prepared.config.tp_size
    mesh = device_mesh(prepared.device.type, (prepared.ranks.world // tp, tp), ("dp", "tp"))
    tensor_parallel(prepared, tp, mesh["tp"])
    shard(prepared, mesh["dp"])
    prepared.ranks = replace(prepared.ranks, dp_rank=mesh.get_local_rank("dp"), dp_world=prepared.ranks.world // tp)


def parallelize(module: Any, plan: TpPlan, mesh: Any) -> Any:
    """Split ``module`` in place over the 1-D ``mesh`` following ``plan`` (parallelize_module
    with the style each name asks for), and give each attention module its share of heads."""
    from torch.distributed.tensor.parallel import parallelize_module

    styles = {fqn: parallel_style(style) for fqn, style in plan.styles.items()}
    parallelize_module(module, mesh, styles)
    for key, heads in plan.heads.items():
        owner, _, attr = key.rpartition(".")
        setattr(module.get_submodule(owner), attr, heads)
    return module


def parallel_style(style: Any) -> Any:
    """The torch ParallelStyle for a style name (a ParallelStyle passes through). The names
    mean what they mean in transformers' plans: "colwise" leaves each rank its columns,
    "rowwise" takes them and adds the partial sums over the ranks, the "_rep" /
    "gather_output" / "split_input" variants take or give whole (replicated) tensors."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, ParallelStyle, RowwiseParallel

    if isinstance(style, ParallelStyle):
        return style
    if style == "colwise":
        return ColwiseParallel()
    if style in ("colwise_gather_output", "colwise_rep"):
        return ColwiseParallel(output_layouts=Replicate())
    if style == "rowwise":
        return RowwiseParallel()
    if style in ("rowwise_rep", "rowwise_split_input", "embedding_rowwise"):
        return RowwiseParallel(input_layouts=Replicate())
    raise ValueError(f"unknown tensor-parallel style {style!r}; one of {', '.join(STYLES)}")


def snippet(value: str) -> str | None:
    if value == "tp":
        return ("# launch: torchrun --nproc-per-node=K train.py; every rank loads the same batches\n"
                "from torch.distributed.device_mesh import init_device_mesh\n"
                "from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module\n"
                "mesh = init_device_mesh('cuda', (K,))\n"
                "# each Linear pair: the first column-wise, the second row-wise (attention: q/k/v column-wise,\n"
                "# output row-wise, and each rank keeps num_heads / K heads); advisor's plan: telemetry.model.tp_plan\n"
                "parallelize_module(model, mesh, {'mlp.up': ColwiseParallel(), 'mlp.down': RowwiseParallel()})")
    if value == "fsdp_tp":
        return ("# launch: torchrun --nproc-per-node=K train.py; ranks of one TP group load the same batches\n"
                "mesh = init_device_mesh('cuda', (K // TP_SIZE, TP_SIZE), mesh_dim_names=('dp', 'tp'))\n"
                "parallelize_module(model, mesh['tp'], plan)  # as for parallelism=tp\n"
                "for block in blocks: fully_shard(block, mesh=mesh['dp'])\n"
                "fully_shard(model, mesh=mesh['dp'])\n"
                "sampler = DistributedSampler(train_set, num_replicas=K // TP_SIZE, rank=mesh.get_local_rank('dp'))")
    return None
