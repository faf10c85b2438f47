"""advisor/core/config.py and export_format.py: TrialConfig, value validation, the export file format."""

from __future__ import annotations

import json

import pytest
import yaml

import advisor
from advisor.core.config import TrialConfig, validate_values
from advisor.core.errors import AdvisorError, ConfigError
from advisor.core.export_format import FORMAT_VERSION, load_config, read_export
from advisor.outputs.export import write_export


def export_document(config: TrialConfig) -> dict:
    return {
        "advisor_config": FORMAT_VERSION,
        "config": config.to_dict(),
        "source": {"study": "digits_cnn-default", "trial": 7, "workload": "/x/model.py"},
        "measured": {"throughput": 5123.0, "peak_memory": 41943040, "score": 0.97},
    }


# ---- TrialConfig ----------------------------------------------------------------------

def test_defaults_are_plain_fp32_eager():
    assert TrialConfig().to_dict() == {
        "batch_size": 64, "precision": "fp32", "threads": None,
        "channels_last": False, "compile": False, "compile_mode": "default",
        "parallelism": "single", "devices": 1, "tp_size": 1, "pp_schedule": "1f1b", "pp_microbatches": None,
        "pp_balance": "params", "comm_hook": "none", "bucket_mb": 25,
        "pruning": "none", "prune_amount": 0.5, "quantization": "none",
        "activation_checkpointing": False, "grad_accumulation": 1, "num_workers": 0, "pin_memory": False,
        "fused_optimizer": False, "ddp_static_graph": False, "ddp_bucket_view": False, "sync_batchnorm": False,
        "fsdp_mixed_precision": "none", "fsdp_reshard": True, "cudnn_benchmark": False,
        "expandable_segments": False, "sdpa_backend": "default", "fp8_scaling": "tensorwise",
        "compile_optimizer": False,
    }
    assert TrialConfig.keys() == list(TrialConfig().to_dict())


def test_from_dict_fills_defaults_and_round_trips():
    cfg = TrialConfig.from_dict({"batch_size": 128, "precision": "bf16"})
    assert cfg == TrialConfig(batch_size=128, precision="bf16")
    assert TrialConfig.from_dict(cfg.to_dict()) == cfg
    full = TrialConfig(batch_size=8, precision="fp16", threads=2, channels_last=True,
                       compile=True, compile_mode="max-autotune")
    assert TrialConfig.from_dict(full.to_dict()) == full


def test_from_dict_reports_every_problem_at_once():
    with pytest.raises(ConfigError) as info:
        TrialConfig.from_dict({
            "batch_size": 0, "precision": "fp64", "threads": -1, "channels_last": "yes",
            "compile": 1, "compile_mode": "turbo", "learning_rate": 0.1,
        }, where="config", source="best.yaml")
    msg = str(info.value)
    assert msg.startswith("best.yaml: config is invalid:\n") and msg.count("best.yaml") == 1  # the file named once
    for key in ("batch_size", "precision", "threads", "channels_last", "compile", "compile_mode", "learning_rate"):
        assert f"\n  - config.{key}:" in msg, key
    assert "unknown key" in msg and "fp64" in msg and "'turbo'" in msg
    assert isinstance(info.value, AdvisorError) and info.value.exit_code == 2


@pytest.mark.parametrize("value", [True, 64.0, "64", -8, None])
def test_batch_size_must_be_a_positive_integer(value):
    with pytest.raises(ConfigError, match="batch_size: expected a positive integer"):
        TrialConfig.from_dict({"batch_size": value})


def test_from_dict_rejects_non_mapping():
    with pytest.raises(ConfigError, match="expected a mapping"):
        TrialConfig.from_dict(["batch_size", 64])


def test_key_is_canonical():
    a = TrialConfig.from_dict({"precision": "bf16", "batch_size": 32})
    b = TrialConfig.from_dict({"batch_size": 32, "precision": "bf16"})
    assert a.key() == b.key()
    assert a.key() != a.replace(batch_size=64).key()
    assert a.key() != a.replace(channels_last=True).key()
    assert json.loads(a.key()) == a.to_dict()
    # Usable to find duplicates.
    assert len({c.key() for c in (a, b, TrialConfig())}) == 2


def test_replace_returns_a_new_validated_config():
    base = TrialConfig()
    changed = base.replace(batch_size=256, compile=True)
    assert (changed.batch_size, changed.compile) == (256, True)
    assert base == TrialConfig()  # frozen: the original is untouched
    with pytest.raises(ConfigError, match="precision"):
        base.replace(precision="fp64")
    with pytest.raises(ConfigError, match="unknown key"):
        base.replace(learning_rate=0.1)


def test_trial_config_is_immutable():
    with pytest.raises(AttributeError):
        TrialConfig().batch_size = 1  # type: ignore[misc]


def test_validate_values():
    assert validate_values({"batch_size": 16, "threads": None, "compile": True}, "x") == []
    problems = validate_values({"batch_size": "big", "foo": 1}, "space.when")
    assert len(problems) == 2
    assert problems[0].startswith("space.when.batch_size:") and "'big'" in problems[0]
    assert problems[1].startswith("space.when.foo: unknown key")
    assert validate_values("fp32", "x") == ["x: expected a mapping of knob: value, found str"]


# ---- dump_export / load_config ---------------------------------------------------------

@pytest.mark.parametrize("fmt,name", [("yaml", "best.yaml"), ("json", "best.json")])
def test_export_round_trip(tmp_path, fmt, name):
    cfg = TrialConfig(batch_size=128, precision="bf16", threads=2, channels_last=True)
    path = tmp_path / name
    text = write_export(export_document(cfg), path, fmt)
    assert path.read_text() == text
    assert load_config(path) == cfg
    assert [p.name for p in tmp_path.iterdir()] == [name]  # no temporary file left behind


def test_export_yaml_is_readable_and_keeps_order(tmp_path):
    text = write_export(export_document(TrialConfig()), None, "yaml")
    assert text.splitlines()[0] == f"advisor_config: {FORMAT_VERSION}"
    assert list(yaml.safe_load(text)) == ["advisor_config", "config", "source", "measured"]


def test_export_json_is_json():
    doc = export_document(TrialConfig(precision="fp16"))
    assert json.loads(write_export(doc, None, "json")) == doc


def test_export_without_path_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_export(export_document(TrialConfig()), None, "yaml")
    assert list(tmp_path.iterdir()) == []


def test_export_overwrites_existing_file(tmp_path):
    path = tmp_path / "best.yaml"
    write_export(export_document(TrialConfig(batch_size=16)), path)
    write_export(export_document(TrialConfig(batch_size=512)), path)
    assert load_config(path).batch_size == 512


def test_export_unknown_format(tmp_path):
    with pytest.raises(ConfigError, match="unknown export format 'toml'"):
        write_export(export_document(TrialConfig()), tmp_path / "x.toml", "toml")
    assert not (tmp_path / "x.toml").exists()


def test_load_bare_mapping(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text("batch_size: 32\nprecision: bf16\n")
    assert load_config(path) == TrialConfig(batch_size=32, precision="bf16")


def test_load_an_export_without_its_version_line(tmp_path):
    """An export's shape, its `advisor_config:` line cut (trimmed, or written by hand): its
    config is read; a mapping that mixes knobs with `config:` is still bad input."""
    path = tmp_path / "cfg.yaml"
    path.write_text("config:\n  precision: bf16\n  batch_size: 64\nsource: {trial: 3}\n")
    assert load_config(path) == TrialConfig(batch_size=64, precision="bf16")
    path.write_text("batch_size: 32\nconfig:\n  precision: bf16\n")
    with pytest.raises(ConfigError, match="config.config: unknown key"):
        load_config(path)


def test_public_load_config(tmp_path):
    path = tmp_path / "cfg.json"
    path.write_text('{"compile": true, "compile_mode": "max-autotune-no-cudagraphs"}')
    assert advisor.load_config(str(path)) == TrialConfig(compile=True, compile_mode="max-autotune-no-cudagraphs")


def test_load_missing_file(tmp_path):
    path = tmp_path / "missing.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(path) in str(info.value) and "cannot read" in str(info.value)


def test_load_invalid_yaml(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("batch_size: [64\n")
    with pytest.raises(ConfigError, match="not valid YAML or JSON"):
        load_config(path)


def test_load_empty_file(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_config(path)


def test_load_wrong_format_version(tmp_path):
    path = tmp_path / "future.yaml"
    doc = export_document(TrialConfig()) | {"advisor_config": FORMAT_VERSION + 1}
    write_export(doc, path)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert f"advisor_config is {FORMAT_VERSION + 1}; this advisor reads versions 1, 2" in str(info.value)


def test_a_version_1_export_is_read_with_version_2s_names(tmp_path):
    """Exports written before issue 32 named the metric's figures after accuracy; they
    still load, and their figures read under the names a version-2 export has."""
    path = tmp_path / "old.yaml"
    path.write_text("advisor_config: 1\nconfig: {batch_size: 32}\n"
                    "measured: {throughput: 10.0, accuracy: 0.9, vs_baseline: {throughput_ratio: 1.5, "
                    "accuracy_delta: -0.01, accuracy_noise_epsilon: 0.02, accuracy_within_noise: true}}\n")
    config, document = read_export(path)
    assert config.batch_size == 32 and document["advisor_config"] == 1
    assert document["measured"] == {"throughput": 10.0, "score": 0.9, "vs_baseline": {
        "throughput_ratio": 1.5, "metric_delta": -0.01, "metric_noise_epsilon": 0.02, "metric_within_noise": True}}
    assert "accuracy" in path.read_text()  # the file itself is left as it was
    trimmed = tmp_path / "trimmed.yaml"  # its version line removed by hand: read as version 1
    trimmed.write_text("config: {batch_size: 32}\nmeasured: {accuracy: 0.9}\n")
    assert read_export(trimmed)[1]["measured"] == {"score": 0.9}


def test_load_export_without_config_section(tmp_path):
    path = tmp_path / "noconfig.yaml"
    path.write_text("advisor_config: 1\nmeasured: {throughput: 1.0}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(path) in str(info.value)


def test_load_reports_bad_values_with_file_and_key(tmp_path):
    path = tmp_path / "bad.yaml"
    doc = export_document(TrialConfig())
    doc["config"]["precision"] = "fp8"
    doc["config"]["batch_size"] = -1
    write_export(doc, path)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: config is invalid:\n") and msg.count(str(path)) == 1
    assert "  - config.precision: " in msg and "'fp8'" in msg
    assert "  - config.batch_size: " in msg


def test_load_uses_safe_yaml(tmp_path):
    path = tmp_path / "evil.yaml"
    path.write_text("!!python/object/apply:os.system ['echo hacked']\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path)


def test_an_unknown_knob_close_to_a_known_one_is_suggested():
    with pytest.raises(ConfigError, match=r"BASELINE.precison: unknown key \(did you mean 'precision'\? known:"):
        TrialConfig.from_dict({"batch_size": 32, "precison": "bf16"}, where="BASELINE", source="model.py")
    with pytest.raises(ConfigError) as info:
        TrialConfig.from_dict({"zzz": 1})
    assert "did you mean" not in str(info.value)  # nothing close: the list alone


def _full_export(tmp_path, config, written=None):
    """An export as `advisor export` writes it (config, source with the config's hash);
    ``written``: the knobs its file lists (an older advisor's fewer), default all."""
    from advisor.core.export_format import config_sha256

    listed = config.to_dict() if written is None else {k: config.to_dict()[k] for k in written}
    doc = {"advisor_config": FORMAT_VERSION, "config": listed,
           "source": {"trial": 3, "workload_kind": "train", "config_sha256": config_sha256(config, written)}}
    path = tmp_path / "best.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path, doc


def test_a_config_edited_after_its_export_says_apply_builds_what_nobody_measured(tmp_path):
    import warnings

    measured = TrialConfig(batch_size=128, precision="bf16", threads=2)
    path, doc = _full_export(tmp_path, measured)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # as exported: not a word
        assert load_config(path) == measured
    old, _ = _full_export(tmp_path, measured, written=("batch_size", "precision", "channels_last", "compile"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an older advisor's export lists fewer knobs: still what it measured
        assert load_config(old).batch_size == 128
    del doc["config"]["batch_size"]  # a line deleted by hand: the default (64) would be built
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.warns(UserWarning, match=r"best.yaml: its config is not the one trial 3 measured \(edited after the "
                                         r"export: it has no batch_size \(the default is used\)\)"):
        assert load_config(path).batch_size == 64
    doc["config"]["batch_size"], doc["config"]["threads"] = 128, 1  # a value changed
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.warns(UserWarning, match=r"not the one trial 3 measured \(edited after the export\); advisor.apply"):
        load_config(path)


def test_an_export_to_a_device_or_pipe_writes_into_it_and_never_replaces_it(tmp_path):
    """`advisor export -o /dev/null` as root renamed a regular file over /dev/null (the
    atomic write's rename); a path that is not a regular file is written into. A named pipe
    stands in for the device here (a regression must not break this machine's /dev/null)."""
    import os
    import stat
    import threading

    from advisor.core.export_format import write_atomically

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()), daemon=True)
    reader.start()
    write_atomically(fifo, "config: {}\n")
    reader.join(10)
    assert got == ["config: {}\n"] and stat.S_ISFIFO(fifo.stat().st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["pipe"]  # no temporary file either


def test_a_read_only_folder_is_a_clear_error_not_a_traceback(tmp_path):
    """A review's `advisor export -o best.yaml` in a read-only folder ended in two chained
    tracebacks (the clean-up's unlink of the temporary file raised too): one error now. A
    real read-only tmpfs where this machine lets the test mount one (as root)."""
    import subprocess

    from advisor.core.errors import ConfigError
    from advisor.core.export_format import write_atomically

    folder = tmp_path / "ro"
    folder.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a read-only tmpfs here")
    try:
        with pytest.raises(ConfigError, match=r"cannot write .*best.yaml: Read-only file system"):
            write_atomically(folder / "best.yaml", "config: {}\n")
        assert list(folder.iterdir()) == []
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_apply_refuses_a_model_cast_after_model_built_it(tmp_path):
    """README: a model already cast is refused. A review's `Net().bfloat16()` with an fp32
    export was accepted and failed at its first step. An export records the dtype model()
    built the weights in; apply() refuses another, and takes a model built so (float64 here)."""
    import torch

    import advisor
    from advisor.core.errors import UnsupportedError

    path, doc = _full_export(tmp_path, TrialConfig(batch_size=32))
    doc["source"] |= {"model_weights_dtype": "float32"}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    config = load_config(path)
    advisor.apply(torch.nn.Linear(3, 3), config)
    for cast in (torch.bfloat16, torch.float16, torch.float64):
        with pytest.raises(UnsupportedError, match=r"apply\(\): the configuration was measured on model\(\) as it "
                           rf"builds its weights, in float32, and this model's weights are {str(cast)[6:]} \(cast "
                           r"after model\(\) built it\?\); pass the model as model\(\) builds it"):
            advisor.apply(torch.nn.Linear(3, 3).to(cast), config)
    doc["source"]["model_weights_dtype"] = "float64"  # a model.py whose model() builds float64 weights
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    advisor.apply(torch.nn.Linear(3, 3).double(), load_config(path))
    advisor.apply(torch.nn.Linear(3, 3).double(), TrialConfig(batch_size=32))  # not an export: nothing to compare


def test_apply_warns_when_the_export_was_measured_on_another_model(tmp_path):
    """An export remembers its model's parameter count: apply() on a model with another
    count (an export from another model.py, a review's mix-up) warns; on the same model, or
    for a config that is not a loaded export, it says nothing."""
    import warnings

    import torch

    import advisor

    measured = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    count = sum(p.numel() for p in measured.parameters())
    path, doc = _full_export(tmp_path, TrialConfig(batch_size=32))
    doc["source"] |= {"model_parameters": count, "workload": "/home/me/lstm.py"}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    config = load_config(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        advisor.apply(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)), config)
        advisor.apply(torch.nn.Linear(3, 3), TrialConfig(batch_size=32))  # not a loaded export: nothing to compare
        advisor.apply(torch.nn.Sequential(torch.nn.LazyLinear(2)), config)  # a lazy module: no count yet
    with pytest.warns(UserWarning, match=r"apply\(\): this model has 12 parameters, the one the configuration was "
                                         rf"measured on \(/home/me/lstm.py\) had {count:,}: is the export from "
                                         r"another model.py\?"):
        advisor.apply(torch.nn.Linear(3, 3), config)
