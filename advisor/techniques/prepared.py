"""``Prepared``: a model set up for one configuration, and the training / inference step
that configuration runs (autocast, gradient scaling, micro-batches, the DataLoader). Built
by ``advisor.apply`` (advisor/techniques/prepare.py); each technique sets its part.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator

from advisor.core.config import TrialConfig
from advisor.techniques.records import Alias, Numerics, Ranks, StepPlan
from advisor.workload.contract import forward

if TYPE_CHECKING:  # torch is imported where it is used
    import torch

__all__ = ["Numerics", "Prepared", "Ranks", "StepPlan", "default_device", "split"]


@dataclass
class Prepared:
    """A model set up for one configuration.

    Attributes:
        model: what to call (the compiled wrapper when compile is on).
        module: the underlying ``nn.Module`` (parameters, state_dict, optimizer).
        device: where the model lives; inputs are moved there by ``to_device``.
        config: the configuration applied.
        workload: "train" or "inference".
        hints: what the model's own file says about splitting it (``tp_plan``,
            ``pipeline_split``) and an example batch (``example_inputs``) for a pipeline's trace.
        ranks: this process among the ranks (``Ranks``).
        numerics: autocast, scaling, input casts, memory format, attention kernels (``Numerics``).
        step: micro-batches, the all-reduce skip, the pipeline, optimizer set-up, finishers
            (``StepPlan``).
        compiled: whether ``model`` is a compiled wrapper.
        eval_model: what ``predict`` calls when it differs from ``model`` (the module
            inside DDP: replicas are identical, evaluation needs no collective).
        loader_options: DataLoader keyword arguments from the data knobs.
        stats: what techniques report about the model (e.g. quantized layers).
        conv1d_swapped: the transformers Conv1D layers replaced by equal nn.Linear ones
            (their weights now (out, in); ``advisor.techniques.conv1d.conv1d_layout`` turns
            a state dict back), for quantization and 2:4 sparsity, which take nn.Linear only.

    The records' fields are also readable and writable under their own names on
    ``Prepared`` (``prepared.rank``, ``prepared.amp_dtype``, ``prepared.accumulation``, ...).
    """

    model: Any
    module: torch.nn.Module
    device: torch.device
    config: TrialConfig
    workload: str = "train"
    hints: dict[str, Any] = field(default_factory=dict)
    ranks: Ranks = field(default_factory=Ranks)
    numerics: Numerics = field(default_factory=Numerics)
    step: StepPlan = field(default_factory=StepPlan)
    compiled: bool = False
    eval_model: torch.nn.Module | None = None
    loader_options: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    conv1d_swapped: list[str] = field(default_factory=list)
    _set_up: set[int] = field(default_factory=set, repr=False)  # ids of the optimizers set up

    rank, world, dp_rank, dp_world = (Alias("ranks") for _ in range(4))
    amp_dtype, scaler, input_dtype, memory_format, sdpa_backends, eval_with_no_grad = (
        Alias("numerics") for _ in range(6))
    accumulation, no_sync, pipeline, optimizer_setup, finishers = (Alias("step") for _ in range(5))

    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        """The region of forward + loss: autocast (none for fp32 / tf32), and the attention
        kernel when one is pinned (``sdpa_backends``)."""
        import torch

        with contextlib.ExitStack() as stack:
            if self.numerics.amp_dtype is not None:
                stack.enter_context(torch.autocast(self.device.type, dtype=self.numerics.amp_dtype))
            if self.numerics.sdpa_backends is not None:
                from torch.nn.attention import sdpa_kernel

                stack.enter_context(sdpa_kernel(self.numerics.sdpa_backends))
            yield

    def to_device(self, batch: Any) -> Any:
        """Move a (nested) batch to the device, 4-D tensors in the chosen memory format."""
        import torch

        if isinstance(batch, torch.Tensor):
            batch = batch.to(self.device, non_blocking=True)
            if self.numerics.input_dtype is not None and batch.is_floating_point():
                batch = batch.to(self.numerics.input_dtype)
            if self.numerics.memory_format is not None and batch.dim() == 4:
                batch = batch.contiguous(memory_format=self.numerics.memory_format)
            return batch
        if isinstance(batch, dict):
            return {k: self.to_device(v) for k, v in batch.items()}
        if isinstance(batch, (tuple, list)):
            return type(batch)(self.to_device(v) for v in batch)
        return batch

    def train_step(self, inputs: Any, target: Any, loss_fn: Callable[[Any, Any], Any], optimizer: Any) -> Any:
        """One optimisation step on a (per-rank) batch, in ``accumulation`` micro-steps
        (gradients all-reduced once, on the last); returns the (detached) mean loss."""
        if self.step.optimizer_setup and id(optimizer) not in self._set_up:
            for setup in self.step.optimizer_setup:
                setup(optimizer)
            self._set_up.add(id(optimizer))
        optimizer.zero_grad(set_to_none=True)
        if self.step.pipeline is not None:  # the schedule runs the micro-batches through the stages
            with self.autocast():
                loss = self.step.pipeline.train_step(self.to_device(inputs), self.to_device(target), loss_fn)
            optimizer.step()
            return loss
        k = self.step.accumulation
        parts = list(zip(split(inputs, k), split(target, k))) if k > 1 else [(inputs, target)]
        total = None
        for i, (x, y) in enumerate(parts):
            x, y = self.to_device(x), self.to_device(y)
            last = i == len(parts) - 1
            sync = contextlib.nullcontext() if last or self.step.no_sync is None else self.step.no_sync()
            with sync:
                with self.autocast():
                    loss = loss_fn(forward(self.model, x), y)
                scaled = loss / len(parts) if len(parts) > 1 else loss
                if self.numerics.scaler is not None:
                    self.numerics.scaler.scale(scaled).backward()
                else:
                    scaled.backward()
            total = scaled.detach() if total is None else total + scaled.detach()
        if self.numerics.scaler is not None:
            self.numerics.scaler.step(optimizer)
            self.numerics.scaler.update()
        else:
            optimizer.step()
        return total

    def loader(self, dataset: Any, shuffle: bool = False, seed: int = 0, drop_last: bool = False,
               per_rank: bool = True, collate_fn: Any = None, batch_size: int | None = None) -> Any:
        """A DataLoader with the configured batch size and data knobs. With several
        data-parallel ranks (``dp_world``) and ``per_rank``, each loads its shard
        (DistributedSampler) and its share of the global batch; ranks of one tensor-parallel
        group or pipeline load the same batches. ``collate_fn``: the DataLoader's (torch's
        default collate if None). A stream (an IterableDataset, ``advisor.workload.stream``)
        keeps its own order (``shuffle`` does not apply), is split among the data-parallel
        ranks item by item, and among DataLoader workers unless it shards itself. ``batch_size``:
        instead of the configuration's (the whole batch: with ``per_rank``, split among the ranks).
        ``drop_last``: the trials train on full batches only (True), and evaluate every item
        (False, the default); a last batch of one item fails BatchNorm in training."""
        import torch
        from torch.utils.data import DataLoader, DistributedSampler

        from advisor.workload.stream import is_stream, shards_by_worker, stream_shard

        split_ranks = per_rank and self.ranks.dp_world > 1
        whole = batch_size or self.config.batch_size
        batch = max(1, whole // self.ranks.dp_world) if split_ranks else whole
        if is_stream(dataset):
            workers = self.loader_options.get("num_workers", 0)
            dataset = stream_shard(dataset, rank=self.ranks.dp_rank if split_ranks else 0,
                                   world=self.ranks.dp_world if split_ranks else 1, batch=batch,
                                   split_workers=workers > 1 and not shards_by_worker(dataset))
            generator = torch.Generator().manual_seed(seed)  # the workers' seeds
            return DataLoader(dataset, batch_size=batch, drop_last=drop_last, generator=generator,
                              collate_fn=collate_fn, **self.loader_options)
        ranks = self.ranks
        sampler: DistributedSampler[Any] | None = (
            DistributedSampler(dataset, num_replicas=ranks.dp_world, rank=ranks.dp_rank, shuffle=shuffle, seed=seed,
                               drop_last=drop_last) if split_ranks else None)
        order = torch.Generator().manual_seed(seed) if shuffle and sampler is None else None
        return DataLoader(dataset, batch_size=batch, shuffle=shuffle and sampler is None, sampler=sampler,
                          drop_last=drop_last, generator=order, collate_fn=collate_fn, **self.loader_options)

    def finish(self) -> None:
        """End of training: run the techniques' finishing steps once (pruning made
        permanent, QAT converted to int8). Evaluate after this."""
        finishers, self.step.finishers = self.step.finishers, []
        for fn in finishers:
            fn()

    def predict(self, inputs: Any) -> Any:
        """Forward pass for evaluation (call under torch.inference_mode / no_grad). Under
        pipeline parallelism every rank calls it with the same batch and the output comes out
        of the last stage: the other ranks get None (``reports`` says which rank has it)."""
        import torch

        with contextlib.ExitStack() as stack:
            if self.numerics.eval_with_no_grad and torch.is_inference_mode_enabled():
                stack.enter_context(torch.inference_mode(False))
                stack.enter_context(torch.no_grad())
            stack.enter_context(self.autocast())
            if self.step.pipeline is not None:
                return self.step.pipeline.predict(self.to_device(inputs))
            return forward(self.model if self.eval_model is None else self.eval_model, self.to_device(inputs))

    @property
    def reports(self) -> bool:
        """Whether this rank reports the model's outputs and metric: the only process, rank 0
        of several, or a pipeline's last stage (where the outputs come out)."""
        return self.step.pipeline.is_last if self.step.pipeline is not None else self.ranks.rank == 0

    def synchronize(self) -> None:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def default_device() -> Any:
    """The current CUDA device (under torchrun: this rank's, ``cuda:$LOCAL_RANK``), else the CPU."""
    import os

    import torch

    if not torch.cuda.is_available():
        return torch.device("cpu")
    local = os.environ.get("LOCAL_RANK")
    return torch.device("cuda", int(local) if local is not None else torch.cuda.current_device())


def split(batch: Any, parts: int) -> list[Any]:
    """Split a (nested) batch into ``parts`` micro-batches along the first dimension; fewer
    when it holds fewer samples than ``parts`` (a loader's last, short batch: ``chunk``
    gives one piece per sample then)."""
    import torch

    if isinstance(batch, torch.Tensor):
        return list(batch.chunk(parts))
    if isinstance(batch, dict):
        pieces = {k: split(v, parts) for k, v in batch.items()}
        n = min((len(v) for v in pieces.values()), default=parts)
        return [{k: v[i] for k, v in pieces.items()} for i in range(n)]
    if isinstance(batch, (tuple, list)):
        pieces_t = [split(v, parts) for v in batch]
        n = min((len(p) for p in pieces_t), default=parts)
        return [type(batch)(p[i] for p in pieces_t) for i in range(n)]
    return [batch] * parts
