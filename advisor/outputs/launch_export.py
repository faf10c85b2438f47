"""``advisor export --format accelerate`` and ``--format torchrun``: how to launch the
exported configuration. The accelerate config is the YAML ``accelerate launch
--config_file`` reads (its keys as accelerate 1.x's ``ClusterConfig`` names them:
mixed_precision, distributed_type, num_processes, dynamo_config, fsdp_config); the torchrun
export is a shell script: the environment the knobs need, then the torchrun line. Both say,
as comments, which knobs have no equivalent there and how to apply them
(``advisor.apply()`` in the script)."""

from __future__ import annotations

from typing import Any

import yaml

from advisor.core.config import TrialConfig
from advisor.core.errors import ConfigError
from advisor.outputs.uncovered import changed_knobs, comment_lines, kept_for_apply, not_covered

_PRECISION = {"fp32": "no", "tf32": "no", "bf16": "bf16", "bf16_full": "bf16", "fp16": "fp16"}
ACCELERATE_COVERED = {"precision", "parallelism", "devices", "compile", "compile_mode", "fsdp_reshard"}
_ALLOC = "expandable_segments:True"


def _has_gpu(document: dict[str, Any]) -> bool:
    return bool((document.get("hardware") or {}).get("gpus"))


def _title(document: dict[str, Any], what: str) -> str:
    s = document["source"]
    return f"# {what} of trial {s['trial']} of study {s['study']!r}, exported by advisor {s['exported']}."


def accelerate_section(document: dict[str, Any]) -> dict[str, Any]:
    """The accelerate config (``config``), the knobs it has no key for (``not_covered``),
    those ``advisor.apply()`` still sets (``advisor_apply``) and the launch line."""
    if document.get("lightning") is not None:
        raise ConfigError("--format accelerate: this study's workload is a Lightning file, whose Trainer starts "
                          "its processes itself (use --format python, or --format torchrun to launch that script)")
    config = TrialConfig.from_dict(document["config"])
    gpu = _has_gpu(document)
    covered = set(ACCELERATE_COVERED)
    processes = config.devices if config.parallelism in ("ddp", "fsdp") else 1
    if config.parallelism == "fsdp":
        kind = "FSDP"
    elif config.parallelism == "ddp":
        kind = "MULTI_GPU" if gpu else "MULTI_CPU"
    else:
        kind = "NO"
        if config.parallelism != "single":
            covered -= {"parallelism", "devices"}
    out: dict[str, Any] = {"compute_environment": "LOCAL_MACHINE", "distributed_type": kind,
                           "mixed_precision": _PRECISION[config.precision], "num_processes": processes,
                           "num_machines": 1, "machine_rank": 0, "use_cpu": not gpu, "debug": False,
                           "rdzv_backend": "static", "same_network": True, "main_training_function": "main"}
    if gpu:
        out["gpu_ids"] = "all"
    if config.compile:
        out["dynamo_config"] = {"dynamo_backend": "INDUCTOR"}
        if config.compile_mode != "default":
            out["dynamo_config"]["dynamo_mode"] = config.compile_mode
    if config.parallelism == "fsdp":
        out["fsdp_config"] = {"fsdp_version": 2, "fsdp_reshard_after_forward": config.fsdp_reshard,
                              "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                              "fsdp_state_dict_type": "SHARDED_STATE_DICT",
                              "fsdp_activation_checkpointing": config.activation_checkpointing}
        covered.add("activation_checkpointing")
    if config.precision in ("tf32", "bf16_full"):
        covered.discard("precision")
    per_process = config.batch_size // (config.grad_accumulation * config.data_ranks())
    script = script_name(document)
    ddp = (f"in {script}: Accelerator(kwargs_handlers=[DistributedDataParallelKwargs("
           + ", ".join(f"{k}={v}" for k, v in _ddp_kwargs(config).items()) + ")]) (from accelerate.utils)")
    how = {
        "comm_hook": ddp, "bucket_mb": ddp, "ddp_bucket_view": ddp, "ddp_static_graph": ddp,
        "fsdp_mixed_precision": "fsdp_config has no key for it: with mixed_precision bf16 accelerate's FSDP2 "
                                "plugin picks its own policy; the trials used MixedPrecisionPolicy(param_dtype="
                                "torch.bfloat16, reduce_dtype=torch.float32)",
        "grad_accumulation": f"the config file has no key for it outside DeepSpeed: Accelerator(gradient_accumulation_"
                             f"steps={config.grad_accumulation}) and `with accelerator.accumulate(model):` around each "
                             "step (the per-device batch is then batch_size / processes / accumulation)",
        "expandable_segments": f'PYTORCH_CUDA_ALLOC_CONF="{_ALLOC}" in the environment of accelerate launch',
        "threads": f"OMP_NUM_THREADS={config.threads} in the environment of accelerate launch "
                   "(or advisor.apply(model, {'threads': ...}))",
        "batch_size": f"your DataLoader: batch_size={per_process} per process",
        "precision": ("TF32: torch.backends.cuda.matmul.allow_tf32 = True, or advisor.apply(model, "
                      "{'precision': 'tf32'})" if config.precision == "tf32" else
                      "the trials held the weights in bf16 too: model.to(torch.bfloat16), or "
                      "advisor.apply(model, {'precision': 'bf16_full'}, device='cpu')"),
        "parallelism": f"accelerate's config has no {config.parallelism} key the trials' split matches: run the "
                       "exported script (advisor export --format python) under torchrun",
    }
    missing = not_covered(config, covered, "accelerate config", how)
    in_code = {"grad_accumulation", "batch_size", "expandable_segments"}  # said above: not advisor.apply's
    return {"config": out, "not_covered": missing, "advisor_apply": kept_for_apply(config, covered | in_code),
            "launch": f"accelerate launch --config_file accelerate.yaml {script}"}


def _ddp_kwargs(config: TrialConfig) -> dict[str, Any]:
    """accelerate's DistributedDataParallelKwargs for the DDP knobs that differ."""
    kwargs: dict[str, Any] = {"bucket_cap_mb": config.bucket_mb}
    if config.comm_hook != "none":
        kwargs["comm_hook"] = f"DDPCommunicationHookType.{config.comm_hook.upper()}"
    if config.ddp_bucket_view:
        kwargs["gradient_as_bucket_view"] = True
    if config.ddp_static_graph:
        kwargs["static_graph"] = True
    return kwargs


def script_name(document: dict[str, Any]) -> str:
    """The script a launch runs by default: serve.py for an inference study's trial, else train.py."""
    return "serve.py" if (document.get("source") or {}).get("workload_kind") == "inference" else "train.py"


def accelerate_yaml(document: dict[str, Any]) -> str:
    section = document.get("accelerate") or accelerate_section(document)
    head = [_title(document, "accelerate config"), f"# Run it:  {section['launch']}"]
    tail = ["#"] + comment_lines(section["not_covered"])
    if section["advisor_apply"]:
        tail.append(f"# in {script_name(document)}: advisor.apply(model, {section['advisor_apply']!r}, device='cpu') "
                    "before accelerator.prepare(model, ...)")
    return "\n".join(head) + "\n" + yaml.safe_dump(section["config"], sort_keys=False) + "\n".join(tail) + "\n"


def torchrun_section(document: dict[str, Any]) -> dict[str, Any]:
    """The environment, the torchrun command, and what the launch leaves to the script."""
    config = TrialConfig.from_dict(document["config"])
    env: dict[str, str] = {}
    if config.threads is not None:
        env["OMP_NUM_THREADS"] = str(config.threads)
    if config.expandable_segments:
        env["PYTORCH_CUDA_ALLOC_CONF"] = _ALLOC
    processes = config.devices if config.parallelism != "single" else 1
    command = ["torchrun", "--standalone", "--nproc_per_node", str(processes), script_name(document)]
    notes = []
    if processes > 1 and config.threads is None:
        notes.append("torchrun sets OMP_NUM_THREADS=1 in each process when it is unset; the trials ran with "
                      "torch's default thread count: set OMP_NUM_THREADS yourself to match")
    covered = {"threads", "expandable_segments", "devices"}
    # the script applies the rest, the distributed wrapper included: advisor.apply wraps the model itself there
    rest = {k: v for k, v in changed_knobs(config).items() if k not in covered}
    how = dict.fromkeys(rest, "set in the script: advisor.apply(model, CONFIG) (advisor export --format python "
                              "writes one)")
    return {"env": env, "command": command, "notes": notes,
            "not_covered": not_covered(config, covered, "torchrun", how), "advisor_apply": rest}


def torchrun_script(document: dict[str, Any]) -> str:
    """A POSIX shell script: its environment, then torchrun on the script named as its
    first argument (train.py when none; serve.py for inference), the other arguments passed on to that script."""
    section = document.get("torchrun") or torchrun_section(document)
    lines = ["#!/bin/sh", _title(document, "The launch"),
             "# Run it:  sh THIS_FILE [your_script.py [its arguments]]",
             f"#          (advisor export --format python -o {section['command'][-1]} writes one)"]
    lines += [f"# {n}" for n in section["notes"]]
    lines += comment_lines(section["not_covered"])
    lines += [f"export {k}={v}" for k, v in section["env"].items()]
    command = " ".join(section["command"][:-1])
    lines.append(f'script="${{1:-{section["command"][-1]}}}"; [ $# -gt 0 ] && shift')
    lines.append(f'exec {command} "$script" "$@"')
    return "\n".join(lines) + "\n"
