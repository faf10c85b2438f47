"""The new knobs through the whole path: a real study on real Ray and SQLite, with trials
that launch their own ranks inside a Ray worker, and an inference study."""

from __future__ import annotations

import json

import optuna
import pytest
import torch

import advisor
from advisor.cli.main import main

from conftest import EXAMPLES

pytestmark = pytest.mark.ray


def load(db, name):
    return optuna.load_study(study_name=name, storage=f"sqlite:///{db}")


def test_cpu_levers_are_measured_in_a_study(ray_session, workdir, capsys):
    """Baseline, DDP over 2 gloo ranks, pruning and QAT: each measured and stored. Pruning
    is measured with QAT only (six configurations, not eight: pruning alone, in one process
    and over two ranks, is left out), so QAT alone, QAT with pruning and neither are each
    measured in one process and over two ranks."""
    space = workdir / "levers.yaml"
    space.write_text(
        "batch_size: 64\n"
        "parallelism: {choices: [single, ddp]}\n"
        "devices: {choices: [2], when: {parallelism: ddp}}\n"
        "quantization: {choices: [none, qat_int8]}\n"
        "pruning: {choices: [none, l1_unstructured], when: {quantization: qat_int8}}\n")
    code = main(["tune", str(EXAMPLES / "digits_cnn.py"), "--space", str(space), "--trials", "6",
                 "--sampler", "random", "--train-samples", "1280"])
    assert code == 0, capsys.readouterr().err
    study = load(workdir / "advisor.db", "digits_cnn-levers")
    # measured: with a training run, or probed only (two-stage evaluation): the same telemetry
    done = [t for t in study.get_trials() if t.state.name in ("COMPLETE", "PRUNED") and "duplicate_of" not in t.user_attrs]
    failed = [t for t in study.get_trials() if t.state.name == "FAIL" and "duplicate_of" not in t.user_attrs]
    assert not failed, [t.user_attrs.get("failure_message") for t in failed]
    configs = [t.user_attrs["config"] for t in done]
    assert len(done) == 6  # the whole space: 2 x (1 + 2)
    ddp = [t for t in done if t.user_attrs["config"]["parallelism"] == "ddp"]
    assert len(ddp) == 3 and all(len(t.user_attrs["telemetry"]["ranks"]) == 2 for t in ddp)
    for t in done:
        facts = t.user_attrs["telemetry"]["model"]
        if t.user_attrs["config"]["pruning"] == "l1_unstructured":
            assert facts["nonzero_parameters"] < facts["parameters"]
        if t.user_attrs["config"]["quantization"] == "qat_int8" and t.state.name == "COMPLETE":
            assert facts["quantized_linear_layers"] == 2  # converted after training (a probe does not train)
    assert {c["parallelism"] for c in configs} == {"single", "ddp"}


def test_inference_workload_end_to_end(ray_session, workdir, capsys):
    space = workdir / "infer.yaml"
    space.write_text("batch_size: {choices: [256]}\nquantization: {choices: [none, int8_dynamic, int8_weight_only]}\n")
    code = main(["tune", str(EXAMPLES / "digits_inference.py"), "--workload", "inference", "--space", str(space),
                 "--trials", "3", "--sampler", "random"])
    out = capsys.readouterr().out
    assert code == 0
    study = load(workdir / "advisor.db", "digits_inference-infer")
    assert study.user_attrs["workload"] == "inference"
    assert study.user_attrs["settings"]["workload"] == "inference"
    done = [t for t in study.get_trials() if t.state.name == "COMPLETE" and "duplicate_of" not in t.user_attrs]
    assert len(done) == 3  # the whole space
    assert not any(t.user_attrs.get("probe_done") for t in study.trials)  # no two stages: evaluation is cheap
    for t in done:
        assert t.user_attrs["train_samples"] == 0 and "timing" in t.user_attrs["phase_s"]
        assert t.user_attrs["accuracy"] > 0.85
    int8 = [t for t in done if t.user_attrs["config"]["quantization"] != "none"]
    assert all(t.user_attrs["telemetry"]["model"]["quantized_linear_layers"] == 4 for t in int8)
    assert "Pareto front" in out
    # the export remembers it was measured for inference: apply() prepares the model for that
    # unasked, and refuses to prepare it for training (a review applied it as training: accepted)
    plain = next(t for t in done if t.user_attrs["config"]["quantization"] == "none")
    assert main(["export", "--storage", f"sqlite:///{workdir / 'advisor.db'}", "--study", "digits_inference-infer",
                 "--trial", str(plain.number), "-o", str(workdir / "serve.yaml")]) == 0
    config = advisor.load_config(workdir / "serve.yaml")
    module = torch.nn.Sequential(torch.nn.Linear(64, 10)).train()
    prepared = advisor.apply(module, config, device="cpu")
    assert prepared.workload == "inference" and not module.training
    assert advisor.apply(torch.nn.Linear(64, 10), config, device="cpu", workload="inference").workload == "inference"
    with pytest.raises(advisor.ConfigError, match="workload='train', but this configuration was measured for "
                                                  r"inference .*pass config.to_dict\(\)"):
        advisor.apply(torch.nn.Linear(64, 10), config, device="cpu", workload="train")
    assert advisor.apply(torch.nn.Linear(64, 10), config.to_dict(), device="cpu", workload="train").workload == "train"


def test_inference_space_drops_training_options(workdir, capsys):
    """A training-only option in an inference study is dropped with the reason, before Ray."""
    code = main(["spaces", "default"])
    assert code == 0
    from advisor.machine.hardware import detect
    from advisor.search.space import filter_space, load_space

    filtered = filter_space(load_space("default"), detect(), {"workload": "inference", "val_size": 360})
    reasons = {(d.knob, d.value): d.reason for d in filtered.dropped}
    assert "inference workload" in reasons[("quantization", "qat_int8")]
    assert "only applies to training" in reasons[("activation_checkpointing", True)]
    assert ("batch_size", 512) in reasons and "validation set" in reasons[("batch_size", 512)]


def test_baseline_with_a_training_option_is_refused_for_inference(workdir, capsys):
    model = workdir / "model.py"
    model.write_text((EXAMPLES / "digits_inference.py").read_text().replace(
        'BASELINE = {"batch_size": 256}', 'BASELINE = {"batch_size": 256, "grad_accumulation": 2}'))
    code = main(["tune", str(model), "--workload", "inference"])
    assert code == 2
    err = capsys.readouterr().err
    assert "BASELINE" in err and "gradient accumulation only applies to training" in err
    assert not (workdir / "advisor.db").exists()


def test_combinations_that_cannot_work_are_skipped_without_running(ray_session, workdir, capsys):
    space = workdir / "clash.yaml"
    space.write_text("batch_size: 64\ncomm_hook: {choices: [none, fp16]}\npruning: {choices: [none, l1_unstructured]}\n")
    code = main(["tune", str(EXAMPLES / "digits_mlp.py"), "--space", str(space), "--trials", "3",
                 "--sampler", "random", "--train-samples", "320"])
    out = capsys.readouterr().out
    assert code == 0
    trials = load(workdir / "advisor.db", "digits_mlp-clash").get_trials()
    skipped = [t for t in trials if t.user_attrs.get("skipped")]
    ran = [t for t in trials if "wall_s" in t.user_attrs]
    # comm_hook=fp16 without DDP cannot work: both such configs skipped, neither run
    assert sorted(t.user_attrs["config"]["pruning"] for t in skipped) == ["l1_unstructured", "none"]
    assert all(t.user_attrs["failure_class"] == "unsupported" and "applies to DDP" in t.user_attrs["failure_message"]
               for t in skipped)
    assert all(t.user_attrs["config"]["comm_hook"] == "none" for t in ran) and len(ran) == 2
    assert "2 proposals skipped without running" in out


def test_a_study_written_before_these_knobs_resumes(ray_session, workdir, capsys):
    """Configs and settings stored by the core version (6 knobs, no workload kind) resume as is."""
    space = workdir / "old.yaml"
    space.write_text("batch_size: {choices: [32, 64, 128]}\nprecision: fp32\n")
    args = ["tune", str(EXAMPLES / "digits_mlp.py"), "--space", str(space), "--sampler", "random",
            "--train-samples", "320"]
    assert main([*args, "--trials", "2", "--storage", "sqlite:///new.db"]) == 0
    new = optuna.load_study(study_name="digits_mlp-old", storage="sqlite:///new.db")
    # Rewrite it as the core version stored it.
    old = optuna.create_study(study_name="digits_mlp-old", storage="sqlite:///advisor.db",
                              directions=[d.name.lower() for d in new.directions])
    for key, value in new.user_attrs.items():
        if key == "settings":
            value = {k: v for k, v in value.items() if k != "workload"}
        if key != "workload":
            old.set_user_attr(key, value)
    core_keys = ("batch_size", "precision", "threads", "channels_last", "compile", "compile_mode")
    for t in new.get_trials():
        attrs = dict(t.user_attrs)
        attrs["config"] = {k: attrs["config"][k] for k in core_keys}
        attrs["config_key"] = json.dumps(attrs["config"], sort_keys=True)
        # as stored, state included: a trial probed only (two-stage evaluation) is PRUNED, without values
        old.add_trial(optuna.trial.create_trial(state=t.state, params=t.params, distributions=t.distributions,
                                                values=t.values, user_attrs=attrs, system_attrs=t.system_attrs))
    capsys.readouterr()
    assert main([*args, "--trials", "3"]) == 0
    resumed = load(workdir / "advisor.db", "digits_mlp-old").get_trials()
    batch_sizes = [t.user_attrs["config"]["batch_size"] for t in resumed if "duplicate_of" not in t.user_attrs]
    assert len(batch_sizes) == 3 and len(set(batch_sizes)) == 3  # one new trial; nothing measured twice
    assert main(["export", "--study", "digits_mlp-old", "--trial", "0", "-o", "best.yaml"]) == 0
    from advisor.core.export_format import load_config

    assert load_config(workdir / "best.yaml").parallelism == "single"  # filled with today's defaults


def test_baseline_that_cannot_split_is_refused_before_any_trial(workdir, capsys):
    model = workdir / "model.py"
    model.write_text((EXAMPLES / "digits_mlp.py").read_text() + '\nBASELINE = {"batch_size": 30, "grad_accumulation": 4}\n')
    assert main(["tune", str(model)]) == 2
    err = capsys.readouterr().err
    assert "BASELINE" in err and "does not split evenly" in err
    assert not (workdir / "advisor.db").exists()
