"""The new knobs through the whole path: a real study on real Ray and SQLite, with trials
that launch their own ranks inside a Ray worker, and an inference study."""

from __future__ import annotations

import optuna
import pytest

from advisor.cli import main
from conftest import EXAMPLES

pytestmark = pytest.mark.ray


def load(db, name):
    return optuna.load_study(study_name=name, storage=f"sqlite:///{db}")


def test_cpu_levers_are_measured_in_a_study(ray_session, workdir, capsys):
    """Baseline, DDP over 2 gloo ranks, pruning and QAT: each measured and stored."""
    space = workdir / "levers.yaml"
    space.write_text(
        "batch_size: 64\n"
        "parallelism: {choices: [single, ddp]}\n"
        "devices: {choices: [2], when: {parallelism: ddp}}\n"
        "pruning: {choices: [none, l1_unstructured]}\n"
        "quantization: {choices: [none, qat_int8]}\n")
    code = main(["tune", str(EXAMPLES / "digits_cnn.py"), "--space", str(space), "--trials", "8",
                 "--sampler", "random", "--train-samples", "1280"])
    assert code == 0, capsys.readouterr().err
    study = load(workdir / "advisor.db", "digits_cnn-levers")
    done = [t for t in study.get_trials() if t.state.name == "COMPLETE" and "duplicate_of" not in t.user_attrs]
    failed = [t for t in study.get_trials() if t.state.name == "FAIL" and "duplicate_of" not in t.user_attrs]
    assert not failed, [t.user_attrs.get("failure_message") for t in failed]
    configs = [t.user_attrs["config"] for t in done]
    assert len(done) == 8  # the whole space: 2 x 2 x 2
    ddp = [t for t in done if t.user_attrs["config"]["parallelism"] == "ddp"]
    assert len(ddp) == 4 and all(len(t.user_attrs["telemetry"]["ranks"]) == 2 for t in ddp)
    for t in done:
        facts = t.user_attrs["telemetry"]["model"]
        if t.user_attrs["config"]["pruning"] == "l1_unstructured":
            assert facts["nonzero_parameters"] < facts["parameters"]
        if t.user_attrs["config"]["quantization"] == "qat_int8":
            assert facts["quantized_linear_layers"] == 2
    assert {c["parallelism"] for c in configs} == {"single", "ddp"}


def test_inference_workload_end_to_end(ray_session, workdir, capsys):
    space = workdir / "infer.yaml"
    space.write_text("batch_size: {choices: [64, 256]}\nquantization: {choices: [none, int8_dynamic, int8_weight_only]}\n")
    code = main(["tune", str(EXAMPLES / "digits_inference.py"), "--workload", "inference", "--space", str(space),
                 "--trials", "6", "--sampler", "random"])
    out = capsys.readouterr().out
    assert code == 0
    study = load(workdir / "advisor.db", "digits_inference-infer")
    assert study.user_attrs["workload"] == "inference"
    assert study.user_attrs["settings"]["workload"] == "inference"
    done = [t for t in study.get_trials() if t.state.name == "COMPLETE" and "duplicate_of" not in t.user_attrs]
    assert len(done) == 6
    for t in done:
        assert t.user_attrs["train_samples"] == 0 and "timing" in t.user_attrs["phase_s"]
        assert t.user_attrs["accuracy"] > 0.85
    int8 = [t for t in done if t.user_attrs["config"]["quantization"] != "none"]
    assert all(t.user_attrs["telemetry"]["model"]["quantized_linear_layers"] == 4 for t in int8)
    assert "Pareto front" in out


def test_inference_space_drops_training_options(workdir, capsys):
    """A training-only option in an inference study is dropped with the reason, before Ray."""
    code = main(["spaces", "default"])
    assert code == 0
    from advisor.hardware import detect
    from advisor.space import filter_space, load_space

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
