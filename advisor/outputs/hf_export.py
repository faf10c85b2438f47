"""``advisor export --format hf``: an exported configuration as transformers'
``TrainingArguments`` keyword arguments (the knobs that map one to one: precision, the
per-device batch, accumulation, checkpointing, compile, the DataLoader, DDP's bucket and
static graph, FSDP, the fused AdamW), a Python snippet that builds them and hands the
model to transformers' own ``Trainer``, and what has no argument there, with how to apply
it (``advisor.apply()`` on the model before the Trainer gets it).

The names are those of the transformers installed here, where it is: 5.x calls
checkpointing ``activation_checkpointing`` (``gradient_checkpointing`` is its deprecated
alias) and turns FSDP on with ``fsdp=True`` and an ``fsdp_config``; 4.x, or no
transformers, gets ``gradient_checkpointing`` and ``fsdp="full_shard auto_wrap"``.
"""

from __future__ import annotations

import pprint
from pathlib import Path
from typing import Any

from advisor.core.config import TrialConfig
from advisor.core.errors import ConfigError
from advisor.outputs.uncovered import comment_lines, kept_for_apply, not_covered
from advisor.techniques.attention import BACKENDS

# knobs a TrainingArguments keyword carries (devices: the launch line's, not an argument)
COVERED = {"batch_size", "precision", "grad_accumulation", "activation_checkpointing", "compile", "compile_mode",
           "num_workers", "pin_memory", "fused_optimizer", "bucket_mb", "ddp_static_graph", "parallelism", "devices",
           "fsdp_reshard"}


def transformers_names() -> tuple[str, str | None]:
    """(the checkpointing argument's name, the installed transformers' version or None).
    Asks the installed TrainingArguments itself: the only word on what it accepts."""
    try:
        import dataclasses
        from importlib.metadata import version

        from transformers import TrainingArguments
    except ImportError:
        return "gradient_checkpointing", None
    names = {f.name for f in dataclasses.fields(TrainingArguments)}
    return ("activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing",
            version("transformers"))


def training_arguments(config: TrialConfig, names: tuple[str, str | None] | None = None) -> dict[str, Any]:
    """The config as TrainingArguments keywords, the knobs without one (``not_covered``),
    the launch line and notes: a plain, JSON-able mapping."""
    checkpointing, version = names or transformers_names()
    modern = checkpointing == "activation_checkpointing"
    ranks = config.data_ranks()
    per_device = config.batch_size // (config.grad_accumulation * ranks)
    args: dict[str, Any] = {"per_device_train_batch_size": per_device,
                            "gradient_accumulation_steps": config.grad_accumulation}
    notes = [f"{config.batch_size} samples per optimizer step = {per_device} per device x {ranks} data-parallel "
             f"process(es) x {config.grad_accumulation} accumulated batch(es)"]
    covered = set(COVERED)
    if config.precision in ("bf16", "bf16_full"):
        args["bf16"] = True
    elif config.precision == "fp16":
        args["fp16"] = True
    elif config.precision == "tf32":
        args["tf32"] = True
    if config.precision == "bf16_full":
        covered.discard("precision")  # bf16=True is autocast; the trials also held the weights in bf16
    if config.activation_checkpointing and config.parallelism != "fsdp":  # FSDP's own: in fsdp_config below
        args[checkpointing] = True
    if config.compile:
        args["torch_compile"] = True
        if config.compile_mode != "default":
            args["torch_compile_mode"] = config.compile_mode
    # TrainingArguments' own defaults differ from the plain setup here: said either way
    args["optim"] = "adamw_torch_fused" if config.fused_optimizer else "adamw_torch"
    args["dataloader_num_workers"] = config.num_workers
    args["dataloader_pin_memory"] = config.pin_memory
    if config.num_workers:
        args["dataloader_persistent_workers"] = True
    args["dataloader_drop_last"] = True
    notes.append("dataloader_drop_last: full batches, as the trials trained; optim and dataloader_pin_memory are "
                 "said either way (TrainingArguments' defaults differ from the plain setup)")
    if config.parallelism == "ddp":
        args["ddp_bucket_cap_mb"] = config.bucket_mb
        if config.ddp_static_graph:
            args["ddp_static_graph"] = True
    elif config.parallelism == "fsdp":
        if modern:
            args["fsdp"] = True
            args["fsdp_config"] = {"version": 2, "reshard_after_forward": config.fsdp_reshard}
        else:
            args["fsdp"] = ("full_shard" if config.fsdp_reshard else "shard_grad_op") + " auto_wrap"
            notes.append("transformers 4.x: FSDP1 here; the trials sharded with FSDP2's fully_shard")
        if config.activation_checkpointing:  # transformers' advice: the argument adds an all-gather under FSDP
            args["fsdp_config"] = args.get("fsdp_config", {}) | {"activation_checkpointing": True}
    elif config.parallelism in ("tp", "pp", "fsdp_tp"):
        covered -= {"parallelism", "devices"}
    how = {"fsdp_mixed_precision": "fsdp_config has no key for it: with bf16=True accelerate's FSDP2 plugin picks "
                                   "its own policy; the trials used MixedPrecisionPolicy(param_dtype=torch.bfloat16, "
                                   "reduce_dtype=torch.float32)",
           "comm_hook": "Trainer wraps the model in DDP itself and takes no hook: register it on the wrapped model "
                        "(trainer.model_wrapped, once training has started): model.register_comm_hook(state=None, "
                        f"hook=default_hooks.{config.comm_hook}_compress_hook), or train with the script advisor "
                        "export --format python writes, under torchrun",
           "sdpa_backend": f"no TrainingArguments equivalent: build the model with attn_implementation='sdpa' and "
                           f"run `with sdpa_kernel(SDPBackend.{BACKENDS.get(config.sdpa_backend)}): trainer.train()` "
                           "(from torch.nn.attention import SDPBackend, sdpa_kernel)",
           "compile_optimizer": "no TrainingArguments equivalent: in a Trainer subclass, create_optimizer(): "
                                "optimizer = super().create_optimizer(); optimizer.step = "
                                "torch.compile(optimizer.step)",
           "expandable_segments": 'PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True" in the environment of the '
                                  "launch (before CUDA starts)",
           "parallelism": f"no TrainingArguments equivalent for {config.parallelism}: run the exported script "
                          "(advisor export --format python) under torchrun; advisor.apply() splits the model",
           "precision": "the trials held the weights in bf16 too: model.to(torch.bfloat16) before the Trainer, "
                        "or advisor.apply(model, {'precision': 'bf16_full'}, device='cpu')"}
    missing = not_covered(config, covered, "TrainingArguments", how)
    launch = (f"torchrun --nproc_per_node {config.devices} train.py" if config.devices > 1 and
              config.parallelism in ("ddp", "fsdp") else "python train.py")
    return {"training_arguments": args, "not_covered": missing,
            "advisor_apply": kept_for_apply(config, covered), "launch": launch, "notes": notes,
            "transformers_version": version}


def hf_section(document: dict[str, Any]) -> dict[str, Any]:
    """The export document's ``transformers`` section; refuses what Trainer cannot train."""
    source = document["source"]
    if source.get("workload_kind") == "inference":
        raise ConfigError("--format hf: this study measured inference; TrainingArguments configure training "
                          "(use --format yaml, json or python)")
    if document.get("lightning") is not None:
        raise ConfigError("--format hf: this study's workload is a Lightning file, which Lightning's Trainer trains, "
                          "not transformers' (use --format python: a Lightning script with these settings)")
    section = training_arguments(TrialConfig.from_dict(document["config"]))
    if not (document.get("hardware") or {}).get("gpus"):  # measured on a CPU: Trainer refuses bf16 there
        section["training_arguments"]["use_cpu"] = True  # without it, and would take any GPU it finds
        section["notes"].append("use_cpu: the study measured on a CPU (a review's bf16 export was refused by "
                                "TrainingArguments without it)")
    section["notes"].append("the optimizer is not set here: Trainer builds AdamW with its own learning_rate "
                            "(5e-05) and a linear decay; the trials used model.py's optimizer(): pass its "
                            "learning_rate (and weight_decay) in args=, or Trainer(optimizers=(optimizer, None))")
    if not _is_transformers(source.get("workload")):
        section["notes"].insert(0, "the study's model is not a transformers model: these are the arguments that "
                                   "reproduce the measured setup if you train it with transformers' Trainer "
                                   "(any torch module whose forward returns the loss)")
    return section


def _is_transformers(path: str | None) -> bool:
    """Whether the study's model.py builds a transformers model (it imports transformers)."""
    try:
        text = Path(path or "").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return "from transformers" in text or "import transformers" in text


_SNIPPET = '''\
"""{title}

TrainingArguments for transformers' Trainer{version}, with the measured setup:
{notes}
Run it:  {launch}
"""

from transformers import Trainer, TrainingArguments

import advisor

TRAINING_ARGUMENTS = {args}
# the changed knobs TrainingArguments has no argument for: advisor.apply() sets them on the model
ADVISOR_APPLY = {apply}


def trainer(model, train_dataset, **kwargs):
    """transformers' Trainer with the exported settings (your model, data, learning rate...), and
    what advisor.apply() prepared: after trainer.train(), prepared.finish() makes pruning
    permanent and converts QAT to int8."""
    prepared = advisor.apply(model, ADVISOR_APPLY, device="cpu") if ADVISOR_APPLY else None
    args = TrainingArguments(**{{"output_dir": "trainer_output", **TRAINING_ARGUMENTS, **kwargs.pop("args", {{}})}})
    model = prepared.module if prepared is not None else model
    return Trainer(model=model, args=args, train_dataset=train_dataset, **kwargs), prepared
'''


def hf_snippet(document: dict[str, Any]) -> str:
    """The transformers section as a Python module: the keywords, the knobs left to
    advisor.apply(), a ``trainer()`` helper, and what is not covered, as comments."""
    section = document.get("transformers") or hf_section(document)
    source = document["source"]
    version = section.get("transformers_version")
    text = _SNIPPET.format(
        title=f"Trial {source['trial']} of study {source['study']!r}, exported by advisor {source['exported']}.",
        version=f" (names as transformers {version} has them)" if version else " (transformers 4.x names)",
        notes="\n".join(f"  {n}" for n in section["notes"]), launch=section["launch"],
        args=pprint.pformat(section["training_arguments"], sort_dicts=False, width=100),
        apply=pprint.pformat(section["advisor_apply"], sort_dicts=False, width=100))
    return text + "\n" + "\n".join(comment_lines(section["not_covered"])) + "\n"
