"""`advisor export --format hf | accelerate | torchrun`: the settings in the terms of the
places users train, each with what has no equivalent there (in the output itself), the
combinations those tools cannot take refused with exit 2, and the torchrun launch run for
real (its environment reaches each process)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

import pytest
import yaml

from advisor.cli.main import main

from conftest import EXAMPLES
from recorded_study import write_recorded_study

TRIALS = [({}, 1000.0, 50.0, 0.5),
          ({"batch_size": 32, "precision": "bf16", "grad_accumulation": 2, "activation_checkpointing": True,
            "fused_optimizer": True, "channels_last": True, "num_workers": 2, "compile": True,
            "compile_mode": "max-autotune", "sdpa_backend": "flash", "compile_optimizer": True}, 1500.0, 40.0, 0.5),
          ({"parallelism": "ddp", "devices": 2, "bucket_mb": 50, "comm_hook": "fp16", "threads": 3,
            "expandable_segments": True}, 1200.0, 45.0, 0.5),
          ({"parallelism": "fsdp", "devices": 2, "fsdp_reshard": False, "precision": "bf16_full"}, 1100.0, 30.0, 0.5)]


def _study(tmp_path, model_file=EXAMPLES / "hf_gpt2.py", **attrs):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = write_recorded_study(url, trials=TRIALS)
    study.set_user_attr("workload_path", str(model_file))
    for key, value in attrs.items():
        study.set_user_attr(key, value)
    return url


def _export(url, trial, fmt, capsys, *extra):
    code = main(["export", "--storage", url, "--trial", str(trial), "--format", fmt, *extra])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def test_hf_snippet_maps_the_knobs_and_says_what_it_does_not(tmp_path, capsys):
    url = _study(tmp_path)
    text = _export(url, 1, "hf", capsys)
    module = ast.parse(text)
    args = next(ast.literal_eval(n.value) for n in module.body
                if isinstance(n, ast.Assign) and n.targets[0].id == "TRAINING_ARGUMENTS")
    checkpointing = "activation_checkpointing" if "activation_checkpointing" in args else "gradient_checkpointing"
    assert args | {checkpointing: True} == args
    assert {k: args[k] for k in ("per_device_train_batch_size", "gradient_accumulation_steps", "bf16", "optim",
                                 "torch_compile", "torch_compile_mode", "dataloader_num_workers",
                                 "dataloader_pin_memory", "dataloader_persistent_workers")} == {
        "per_device_train_batch_size": 16, "gradient_accumulation_steps": 2, "bf16": True,
        "optim": "adamw_torch_fused", "torch_compile": True, "torch_compile_mode": "max-autotune",
        "dataloader_num_workers": 2, "dataloader_pin_memory": False, "dataloader_persistent_workers": True}
    assert "ADVISOR_APPLY = {'channels_last': True}" in text
    assert "# not covered here (3 knobs):" in text and "channels_last=True: no TrainingArguments equivalent: " \
        "advisor.apply(model, {'channels_last': True}" in text
    assert "with sdpa_kernel(SDPBackend.FLASH_ATTENTION): trainer.train()" in text  # apply() would not reach it
    assert "optimizer.step = torch.compile(optimizer.step)" in text
    assert "not a transformers model" not in text  # examples/hf_gpt2.py is one

    out = _export(url, 2, "hf", capsys, "-o", str(tmp_path / "ddp_args.py"))
    assert "use it:    from ddp_args import trainer" in out
    text = (tmp_path / "ddp_args.py").read_text()
    assert "'ddp_bucket_cap_mb': 50" in text and "Run it:  torchrun --nproc_per_node 2 train.py" in text
    assert "comm_hook='fp16': Trainer wraps the model in DDP itself and takes no hook" in text
    assert "threads=3" in text and "expandable_segments=True" in text  # not covered: advisor.apply sets them
    assert "'comm_hook'" not in text.split("ADVISOR_APPLY = ")[1].split("\n")[0]  # apply() would not wrap: said


def test_hf_json_carries_the_arguments_and_the_not_covered_list(tmp_path, capsys):
    import advisor

    url = _study(tmp_path)
    document = json.loads(_export(url, 3, "hf", capsys, "--json"))
    section = document["transformers"]
    args = section["training_arguments"]
    assert args["bf16"] is True and args["per_device_train_batch_size"] == 32
    if section["transformers_version"] and args.get("fsdp") is True:  # transformers 5.x terms
        assert args["fsdp_config"] == {"version": 2, "reshard_after_forward": False}
    else:
        assert args["fsdp"] == "shard_grad_op auto_wrap"
    missing = {e["knob"]: e["how"] for e in section["not_covered"]}
    assert set(missing) == {"precision"} and "model.to(torch.bfloat16)" in missing["precision"]
    (tmp_path / "best.json").write_text(json.dumps(document))
    assert advisor.load_config(tmp_path / "best.json").parallelism == "fsdp"  # still the config file


def test_hf_for_a_model_that_is_not_a_transformers_one_says_so(tmp_path, capsys):
    url = _study(tmp_path, model_file=EXAMPLES / "digits_mlp.py")
    text = _export(url, 1, "hf", capsys)
    assert "the study's model is not a transformers model" in text and "TRAINING_ARGUMENTS = " in text


@pytest.mark.parametrize("fmt, attrs, message", [
    ("hf", {"workload": "inference", "settings": {"workload": "inference", "train_samples": 1}}, "measured inference"),
    ("hf", {"workload_format": "lightning"}, "Lightning file"),
    ("accelerate", {"workload_format": "lightning"}, "Lightning file"),
])
def test_what_a_tool_cannot_take_is_refused_with_exit_2(tmp_path, capsys, fmt, attrs, message):
    url = _study(tmp_path, **attrs)
    assert main(["export", "--storage", url, "--trial", "1", "--format", fmt]) == 2
    out, err = capsys.readouterr()
    assert message in err and out == ""
    with pytest.raises(SystemExit) as exited:  # argparse's own refusal, exit 2 as well
        main(["export", "--storage", url, "--trial", "1", "--format", "toml"])
    assert exited.value.code == 2 and "invalid choice: 'toml'" in capsys.readouterr().err


def test_accelerate_config_is_what_accelerate_reads(tmp_path, capsys):
    url = _study(tmp_path)
    text = _export(url, 3, "accelerate", capsys)
    config = yaml.safe_load(text)
    assert config["distributed_type"] == "FSDP" and config["num_processes"] == 2
    assert config["mixed_precision"] == "bf16" and config["fsdp_config"]["fsdp_reshard_after_forward"] is False
    assert "precision='bf16_full'" in text and "model.to(torch.bfloat16)" in text
    text = _export(url, 1, "accelerate", capsys)
    config = yaml.safe_load(text)
    assert config["dynamo_config"] == {"dynamo_backend": "INDUCTOR", "dynamo_mode": "max-autotune"}
    assert config["distributed_type"] == "NO" and config["use_cpu"] is True  # the study ran on a CPU
    assert "Accelerator(gradient_accumulation_steps=2)" in text
    assert "activation_checkpointing=True: no accelerate config equivalent" in text
    assert "# in train.py: advisor.apply(model, {" in text
    ddp = _export(url, 2, "accelerate", capsys)
    assert yaml.safe_load(ddp)["distributed_type"] == "MULTI_CPU"
    assert "DistributedDataParallelKwargs(bucket_cap_mb=50, comm_hook=DDPCommunicationHookType.FP16)" in ddp
    assert 'PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"' in ddp

    pytest.importorskip("accelerate", reason="accelerate's own reader checks the file (pip install accelerate)")
    from accelerate.commands.config.config_args import ClusterConfig

    (tmp_path / "accelerate.yaml").write_text(text)
    loaded = ClusterConfig.from_yaml_file(str(tmp_path / "accelerate.yaml"))
    assert str(loaded.mixed_precision) == "bf16" and loaded.dynamo_config["dynamo_mode"] == "max-autotune"


def test_torchrun_launch_sets_the_environment_each_process_sees(tmp_path, capsys):
    url = _study(tmp_path)
    out = _export(url, 2, "torchrun", capsys, "-o", str(tmp_path / "launch.sh"))
    assert f"run it:    sh {tmp_path / 'launch.sh'} train.py" in out
    text = (tmp_path / "launch.sh").read_text()
    assert "export OMP_NUM_THREADS=3" in text and "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in text
    assert "comm_hook='fp16': set in the script: advisor.apply(model, CONFIG)" in text
    probe = tmp_path / "probe.py"
    # each rank writes a file of its own: two ranks printing to one pipe can interleave their
    # words (PYTHONUNBUFFERED makes print write word by word)
    probe.write_text("import os, sys\ne = os.environ\nopen(os.path.join(sys.argv[1], 'rank' + e['RANK']), 'w')"
                     ".write(' '.join(('rank', e['RANK'], e['WORLD_SIZE'], e['OMP_NUM_THREADS'], "
                     "e['PYTORCH_CUDA_ALLOC_CONF'])))\n")
    env = os.environ | {"PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}"}
    run = subprocess.run(["sh", str(tmp_path / "launch.sh"), str(probe), str(tmp_path)], capture_output=True,
                         text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = sorted(p.read_text() for p in tmp_path.glob("rank*"))
    assert lines == [f"rank {r} 2 3 expandable_segments:True" for r in (0, 1)]
    document = json.loads(_export(url, 2, "torchrun", capsys, "--json"))
    assert document["format"] == "advisor.export/2" and document["torchrun"]["env"]["OMP_NUM_THREADS"] == "3"
    assert document["torchrun"]["command"][:4] == ["torchrun", "--standalone", "--nproc_per_node", "2"]
    assert {e["knob"] for e in document["torchrun"]["not_covered"]} == {"parallelism", "bucket_mb", "comm_hook"}
    single = _export(url, 1, "torchrun", capsys)
    assert 'script="${1:-train.py}"; [ $# -gt 0 ] && shift' in single
    assert 'exec torchrun --standalone --nproc_per_node 1 "$script" "$@"' in single


def test_hf_names_follow_the_installed_transformers():
    """transformers 5.x renamed gradient_checkpointing (a deprecated alias now) and turns FSDP
    on with fsdp=True; 4.x, or no transformers here, gets the older names."""
    from advisor.core.config import TrialConfig
    from advisor.outputs.hf_export import training_arguments

    config = TrialConfig(parallelism="fsdp", devices=2, activation_checkpointing=True)
    old = training_arguments(config, ("gradient_checkpointing", None))
    args = old["training_arguments"]  # under FSDP, FSDP's own checkpointing (transformers' advice)
    assert args["fsdp"] == "full_shard auto_wrap" and args["fsdp_config"] == {"activation_checkpointing": True}
    assert "gradient_checkpointing" not in args
    plain = training_arguments(TrialConfig(activation_checkpointing=True), ("gradient_checkpointing", None))
    assert plain["training_arguments"]["gradient_checkpointing"] is True
    new = training_arguments(config, ("activation_checkpointing", "5.24.0"))
    assert new["training_arguments"]["fsdp_config"] == {"version": 2, "reshard_after_forward": True,
                                                        "activation_checkpointing": True}
    assert new["training_arguments"]["fsdp"] is True and new["launch"] == "torchrun --nproc_per_node 2 train.py"


def test_an_inference_trials_exports_read_as_serving_not_training(tmp_path, capsys, monkeypatch):
    """A review's inference exports read like training scripts: TRAIN_SAMPLES, 'the training
    set's shuffle', a shuffled training loader and train.py to launch. They say serving now."""
    monkeypatch.chdir(tmp_path)
    url = _study(tmp_path, model_file=EXAMPLES / "digits_inference.py", workload="inference",
                 settings={"workload": "inference", "train_samples": 1, "seed": 0})
    assert main(["export", "--storage", url, "--trial", "0", "--format", "python", "-o", "serve.py"]) == 0
    script = (tmp_path / "serve.py").read_text()
    ast.parse(script)
    assert "TRAIN_SAMPLES" not in script and "shuffle" not in script and "train.py" not in script
    assert "workload='inference'" in script and "# launch: python serve.py" in script
    assert "#   loader = DataLoader(val_set, batch_size=" in script and "torch.inference_mode()" in script
    capsys.readouterr()
    for fmt, name in (("accelerate", "acc.yaml"), ("torchrun", "launch.sh")):
        assert main(["export", "--storage", url, "--trial", "1", "--format", fmt, "-o", name]) == 0
        said = capsys.readouterr().out
        assert f"{name} serve.py" in said and "train.py" not in said + (tmp_path / name).read_text()
    (tmp_path / "t").mkdir()
    training = _study(tmp_path / "t", model_file=EXAMPLES / "digits_mlp.py")
    assert main(["export", "--storage", training, "--trial", "1", "--format", "torchrun", "-o", "t.sh"]) == 0
    assert 'script="${1:-train.py}"' in (tmp_path / "t.sh").read_text()
