"""`advisor export --format hf`, trained for real: the exported module's TrainingArguments go
to transformers' own Trainer on a tiny GPT-2 (built from a config, nothing downloaded), a
few steps on the CPU, and the settings are seen to take effect inside the run: bf16
autocast in the forward, the per-device batch, two forwards per optimizer step
(accumulation), the blocks recomputed in backward (checkpointing), torch's fused AdamW."""

from __future__ import annotations

import importlib.util
import json

import pytest

from advisor.cli.main import main

from conftest import EXAMPLES, skip_without
from recorded_study import write_recorded_study

skip_without("transformers")
# transformers' Trainer needs accelerate (TrainingArguments refuses to pick a device without it)
skip_without("accelerate", "transformers' Trainer needs accelerate: pip install accelerate")

CHANGES = {"batch_size": 8, "precision": "bf16", "grad_accumulation": 2, "activation_checkpointing": True,
           "fused_optimizer": True, "threads": 1}


def _exported(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = write_recorded_study(url, trials=[({}, 1000.0, 50.0, 0.5), (CHANGES, 1500.0, 40.0, 0.5)])
    study.set_user_attr("workload_path", str(EXAMPLES / "hf_gpt2.py"))
    path = tmp_path / "training_args.py"
    assert main(["export", "--storage", url, "--trial", "1", "--format", "hf", "-o", str(path)]) == 0
    capsys.readouterr()
    spec = importlib.util.spec_from_file_location("training_args", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Tokens:
    """16 windows of 16 tokens: dicts, as Trainer's default collator takes them."""

    def __init__(self):
        import torch

        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 64, (16, 16), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def test_trainer_runs_with_the_exported_arguments_and_they_take_effect(tmp_path, capsys):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    exported = _exported(tmp_path, capsys)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2,
                                       bos_token_id=0, eos_token_id=0))
    seen = {"batches": [], "dtypes": set(), "mlp_calls": 0}

    def on_model(module, args, kwargs):
        seen["batches"].append(kwargs["input_ids"].shape[0])

    def on_mlp(module, args, output):
        seen["dtypes"].add(output.dtype)
        seen["mlp_calls"] += 1

    model.register_forward_pre_hook(on_model, with_kwargs=True)
    model.transformer.h[0].mlp.c_fc.register_forward_hook(on_mlp)
    steps, threads = 2, torch.get_num_threads()
    try:
        trainer, prepared = exported.trainer(model, Tokens(), args={
            "output_dir": str(tmp_path / "out"), "max_steps": steps, "report_to": "none",
            "save_strategy": "no", "logging_strategy": "no", "disable_tqdm": True})
        # threads has no TrainingArguments keyword: the module's advisor.apply() set it
        assert exported.ADVISOR_APPLY == {"threads": 1} and prepared.module is model
        assert torch.get_num_threads() == 1
        result = trainer.train()
    finally:
        torch.set_num_threads(threads)

    assert result.global_step == steps
    assert seen["batches"] == [4] * (2 * steps)  # per device 8 / 2 accumulated, two forwards per optimizer step
    assert trainer.args.gradient_accumulation_steps == 2
    assert seen["dtypes"] == {torch.bfloat16}  # bf16 autocast in the forward (on the CPU too)
    assert trainer.accelerator.mixed_precision == "bf16"
    assert getattr(model, "is_activation_checkpointing", None) or model.is_gradient_checkpointing  # 5.x, 4.x names
    assert seen["mlp_calls"] == 2 * 2 * steps  # each micro-batch's block run again in backward
    optimizer = trainer.optimizer.optimizer  # accelerate's wrapper around torch's
    assert type(optimizer) is torch.optim.AdamW and optimizer.defaults["fused"] is True


def test_the_json_export_builds_the_same_training_arguments(tmp_path, capsys):
    from transformers import TrainingArguments

    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = write_recorded_study(url, trials=[({}, 1000.0, 50.0, 0.5), (CHANGES, 1500.0, 40.0, 0.5)])
    study.set_user_attr("workload_path", str(EXAMPLES / "hf_gpt2.py"))
    assert main(["export", "--storage", url, "--trial", "1", "--format", "hf", "--json"]) == 0
    section = json.loads(capsys.readouterr().out)["transformers"]
    args = TrainingArguments(output_dir=str(tmp_path / "out"), **section["training_arguments"])
    assert (args.bf16, args.per_device_train_batch_size, args.gradient_accumulation_steps) == (True, 4, 2)
    assert args.use_cpu and any("the optimizer is not set here" in n for n in section["notes"])  # a CPU study
    assert args.optim == "adamw_torch_fused" and args.gradient_checkpointing is True
    assert [e["knob"] for e in section["not_covered"]] == ["threads"] and section["advisor_apply"] == {"threads": 1}


@pytest.mark.parametrize("changes", [
    {"parallelism": "ddp", "devices": 2, "bucket_mb": 50, "ddp_static_graph": True, "num_workers": 2},
    {"parallelism": "fsdp", "devices": 2, "fsdp_reshard": False, "activation_checkpointing": True},
    {"compile": True, "compile_mode": "max-autotune"},
], ids=["ddp", "fsdp", "compile"])
def test_the_installed_training_arguments_take_every_exported_keyword(tmp_path, changes):
    """Launching DDP / FSDP needs several processes: here the installed TrainingArguments
    accept the keywords and hold them as given (the launch line is torchrun's)."""
    from transformers import TrainingArguments

    from advisor.core.config import TrialConfig
    from advisor.outputs.hf_export import training_arguments

    exported = training_arguments(TrialConfig(**changes))["training_arguments"]
    args = TrainingArguments(output_dir=str(tmp_path / "out"), use_cpu=True, **exported)
    for key, value in exported.items():
        held = getattr(args, key)
        assert held == value or (isinstance(value, dict) and held | value == held), key  # fsdp_config gains defaults
