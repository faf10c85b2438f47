"""What an exported configuration of a Lightning file is in Lightning's own terms: the
Trainer arguments where a knob has one (precision, strategy, devices,
accumulate_grad_batches), the DataLoader settings, and the knobs that only
``advisor.apply()`` sets on the module (pruning, quantization, channels_last, activation
checkpointing, compile, threads) — and a runnable script that does both.
"""

from __future__ import annotations

import pprint
import shlex
from typing import Any

from advisor.core.config import TrialConfig
from advisor.techniques.attention import BACKENDS
from advisor.workload.lightning_step import LIGHTNING_PRECISION

# knobs a Trainer argument or the DataLoader carries; the rest go through advisor.apply()
TRAINER_KNOBS = ("precision", "parallelism", "devices", "comm_hook", "bucket_mb", "grad_accumulation", "batch_size",
                 "num_workers", "pin_memory", "sync_batchnorm", "cudnn_benchmark", "ddp_static_graph",
                 "ddp_bucket_view", "fsdp_mixed_precision", "fsdp_reshard", "tp_size", "pp_schedule", "pp_microbatches",
                 "pp_balance")
# knobs advisor.apply() sets in its own training step, which Lightning's loop does not run: said as notes
STEP_KNOBS = {
    "fused_optimizer": "fused_optimizer: pass fused=True to the optimizer configure_optimizers builds",
    "compile_optimizer": "compile_optimizer: in configure_optimizers, optimizer.step = torch.compile(optimizer.step)",
    "sdpa_backend": "sdpa_backend={value}: wrap forward in torch.nn.attention.sdpa_kernel(SDPBackend.{kernel})",
    "expandable_segments": 'expandable_segments: set PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True" before CUDA starts',
}
_HOOKS = {"fp16": "fp16_compress_hook", "bf16": "bf16_compress_hook"}


def lightning_arguments(config: TrialConfig) -> dict[str, Any]:
    """The config as Trainer arguments, DataLoader settings and the knobs left to
    ``advisor.apply()`` (a plain, YAML-able mapping; ``notes`` says what differs)."""
    trainer: dict[str, Any] = {"precision": LIGHTNING_PRECISION[config.precision], "accumulate_grad_batches": config.grad_accumulation}
    notes = []
    if config.precision == "tf32":
        notes.append('TF32: call torch.set_float32_matmul_precision("high") before fit (advisor.apply does)')
    if config.sync_batchnorm:
        trainer["sync_batchnorm"] = True
    if config.cudnn_benchmark:
        trainer["benchmark"] = True
    for key, note in STEP_KNOBS.items():
        value = getattr(config, key)
        if value not in (False, "default"):
            notes.append(note.format(value=value, kernel=BACKENDS.get(str(value), "")))
    if config.parallelism == "single":
        trainer["devices"] = 1
    else:
        trainer["devices"] = config.devices
        if config.parallelism == "ddp":
            strategy: Any = "ddp"
            if (config.comm_hook != "none" or config.bucket_mb != TrialConfig().bucket_mb or config.ddp_static_graph
                    or config.ddp_bucket_view):
                strategy = {"class": "lightning.pytorch.strategies.DDPStrategy", "bucket_cap_mb": config.bucket_mb}
                if config.ddp_static_graph:
                    strategy["static_graph"] = True
                if config.ddp_bucket_view:
                    strategy["gradient_as_bucket_view"] = True
                if config.comm_hook != "none":
                    strategy["ddp_comm_hook"] = ("torch.distributed.algorithms.ddp_comm_hooks.default_hooks."
                                                 + _HOOKS[config.comm_hook])
            trainer["strategy"] = strategy
        elif config.parallelism == "pp":
            notes.append("pipeline parallelism: Lightning has no pipeline strategy; the trials ran "
                         "torch.distributed.pipelining (advisor.apply with this config under torchrun does the same)")
        else:
            groups = config.data_ranks()
            trainer["strategy"] = {"class": "lightning.pytorch.strategies.ModelParallelStrategy",
                                   "data_parallel_size": groups, "tensor_parallel_size": config.devices // groups}
            if config.parallelism in ("tp", "fsdp_tp"):
                notes.append("tensor parallelism: in configure_model, parallelize_module(self, "
                             "self.device_mesh['tensor_parallel'], plan) with the plan the trial used "
                             "(its telemetry.model.tp_plan: each Linear pair column-wise then row-wise)")
            if config.parallelism in ("fsdp", "fsdp_tp"):
                extra = (", mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)"
                         if config.fsdp_mixed_precision == "bf16" else "")
                extra += ", reshard_after_forward=False" if not config.fsdp_reshard else ""
                notes.append("FSDP: the trials sharded with FSDP2's fully_shard on each block, then the module "
                             "(Lightning's 'fsdp' strategy is FSDP1); under ModelParallelStrategy do the same in "
                             "configure_model: for block in blocks: fully_shard(block, "
                             f"mesh=self.device_mesh['data_parallel']{extra})")
    ranks = config.data_ranks()
    if ranks > 1:
        notes.append(f"a training stream (an IterableDataset) is not split among ranks by Lightning: split it in the "
                     f"dataset (rank r of {ranks} keeping items r, r+{ranks}, ... as the trials did), else every "
                     "rank trains on the same items")
    per_device = config.batch_size // (config.grad_accumulation * ranks)
    loader = {"batch_size": per_device, "num_workers": config.num_workers, "pin_memory": config.pin_memory}
    if config.num_workers:
        loader["persistent_workers"] = True
    default = TrialConfig().to_dict()
    applied = {k: v for k, v in config.to_dict().items()
               if k not in TRAINER_KNOBS and k not in STEP_KNOBS and v != default[k]}
    return {"trainer": trainer, "dataloader": loader, "advisor_apply": applied, "notes": notes,
            "batch": (f"{config.batch_size} samples per optimizer step = {per_device} per device x "
                      f"{ranks} data-parallel device(s) x {config.grad_accumulation} accumulated batch(es)")}


_SCRIPT = '''\
"""{title}

{measured}
Run it:  python {shell_name}   (Lightning starts one process per device itself)
"""

import importlib.util

import lightning as L
import torch

import advisor

WORKLOAD = {workload!r}  # your Lightning file
TRAIN_SAMPLES = {train_samples}  # what each trial trained on before evaluation
SEED = {seed}  # the trials' seed (initial weights; Lightning's own loaders shuffle from it too)
CONFIG = {config}
TRAINER = {trainer}  # the Trainer arguments of this config
DATALOADER = {loader}  # set these in your DataModule's DataLoaders


def load(path):
    spec = importlib.util.spec_from_file_location("workload", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    w = load(WORKLOAD)
    L.seed_everything(SEED, verbose=False)
    lit = {make_module}
    data = {make_data}
    data.batch_size = DATALOADER["batch_size"]  # if your DataModule reads self.batch_size
    # the knobs without a Trainer argument (pruning, quantization, channels_last, checkpointing,
    # compile, threads) through advisor.apply, on the module itself; precision, devices and
    # accumulation are the Trainer's
    kept = {{k: v for k, v in CONFIG.items() if k not in {trainer_knobs!r}}}
    prepared = advisor.apply(lit, kept, device="cpu")
    steps = max(1, round(TRAIN_SAMPLES / CONFIG["batch_size"]))
    trainer = L.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, **TRAINER)
    trainer.fit(prepared.model, datamodule=data)
    prepared.finish()  # pruning made permanent, QAT converted to int8
    trainer.validate(prepared.module, datamodule=data)


if __name__ == "__main__":
    main()
'''


def lightning_script(document: dict[str, Any], measured: str, name: str) -> str:
    """A runnable script for a Lightning file's export: advisor.apply for the module's
    knobs, then Lightning's own Trainer with this config's arguments."""
    source, config = document["source"], TrialConfig.from_dict(document["config"])
    args = lightning_arguments(config)
    trainer = dict(args["trainer"])
    if isinstance(trainer.get("strategy"), dict):
        trainer.pop("strategy")  # a strategy object: see the note below the script
    parts = document.get("lightning_parts") or {}
    script = _SCRIPT.format(
        title=f"Trial {source['trial']} of study {source['study']!r} (a Lightning file), exported by advisor "
              f"{source['exported']}.",
        measured=measured, name=name, shell_name=shlex.quote(name), workload=source.get("workload") or "model.py",
        train_samples=source.get("train_samples") or 1, seed=source.get("seed", 0),
        config=pprint.pformat(config.to_dict(), sort_dicts=False, width=100),
        trainer=pprint.pformat(trainer, sort_dicts=False, width=100),
        loader=pprint.pformat(args["dataloader"], sort_dicts=False, width=100),
        make_module=f"w.{parts.get('module', 'model()')}", make_data=f"w.{parts.get('data', 'datamodule()')}",
        trainer_knobs=TRAINER_KNOBS + tuple(STEP_KNOBS))
    tail = [f"# {args['batch']}"]
    if isinstance(args["trainer"].get("strategy"), dict):
        tail.append(f"# strategy: {args['trainer']['strategy']} (pass the strategy object as Trainer(strategy=...))")
    tail += [f"# {note}" for note in args["notes"]]
    return script + "\n" + "\n".join(tail) + "\n"
