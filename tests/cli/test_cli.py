"""The command line: help and examples, light imports, hardware, spaces, init; layering."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from advisor.cli.main import main
from advisor.core.errors import StudyError
from advisor.core.units import parse_size
from advisor.workload.contract import load_workload
from advisor.workload.preflight import preflight

COMMANDS = ("tune", "hardware", "spaces", "export", "init", "tui", "report", "dashboard")


def run_py(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout


def test_help_imports_no_heavy_module():
    out = run_py("import sys\nfrom advisor.cli.main import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
                 "print('LOADED', sorted(m for m in ('torch', 'ray', 'optuna', 'textual') if m in sys.modules))")
    assert "tune" in out and "LOADED []" in out


def test_engine_never_imports_the_tui():
    """advisor/ must not pull in textual or tui/, whatever part of it is imported."""
    code = ("import sys, pkgutil, importlib, advisor\n"
            "for m in pkgutil.walk_packages(advisor.__path__, 'advisor.'):\n"
            "    if m.name != 'advisor.__main__':\n        importlib.import_module(m.name)\n"
            "print(sorted(n for n in sys.modules if n == 'textual' or n.startswith(('textual.', 'tui'))))")
    assert run_py(code).strip() == "[]"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_subcommand_help_ends_with_examples(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = capsys.readouterr().out.rstrip()
    assert "examples:" in out
    assert out.splitlines()[-1].strip().startswith("advisor ")


def test_hardware_json_lists_every_option_with_reason(capsys):
    assert main(["hardware", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["fingerprint"]["cpu_cores"] >= 1 and data["fingerprint"]["torch_version"]
    options = {(o["knob"], json.dumps(o["value"])): o for o in data["options"]}
    assert options[("precision", '"fp32"')]["available"] is True
    assert all(o["reason"] for o in data["options"] if not o["available"])
    if not data["fingerprint"]["gpus"]:
        assert "no CUDA GPU" in options[("precision", '"tf32"')]["reason"]


def test_hardware_table(capsys):
    assert main(["hardware"]) == 0
    out = capsys.readouterr().out
    assert "precision" in out and "compile" in out and "Trials run on" in out


def test_spaces_lists_presets_and_shows_one(capsys):
    assert main(["spaces"]) == 0
    out = capsys.readouterr().out
    assert "default" in out and "configurations" in out
    assert main(["spaces", "default"]) == 0
    out = capsys.readouterr().out
    assert "batch_size" in out and "[16, 32, 64, 128, 256, 512]" in out


def test_spaces_unknown_is_exit_2(capsys):
    assert main(["spaces", "no-such-space"]) == 2
    assert "not a shipped preset" in capsys.readouterr().err


def test_init_writes_a_template_that_passes_preflight(tmp_path, capsys):
    path = tmp_path / "model.py"
    assert main(["init", str(path)]) == 0
    facts = preflight(load_workload(path))
    assert facts["train_size"] == 1600
    assert load_workload(path).metric_spec.name == "accuracy"
    assert main(["init", str(path)]) == 2  # no silent overwrite
    assert "already exists" in capsys.readouterr().err


def test_init_writes_a_transformers_template_that_passes_preflight(tmp_path):
    pytest.importorskip("transformers")
    path = tmp_path / "lm.py"
    assert main(["init", str(path), "--template", "transformers"]) == 0
    workload = load_workload(path)
    assert preflight(workload)["train_size"] == 1024
    assert workload.metric_spec.name == "next-token accuracy"


def test_init_writes_a_lightning_template_that_passes_preflight(tmp_path):
    pytest.importorskip("lightning")
    path = tmp_path / "lit.py"
    assert main(["init", str(path), "--template", "lightning"]) == 0
    workload = load_workload(path)
    assert workload.kind == "lightning" and workload.metric_spec.name == "val_acc"
    assert preflight(workload)["train_size"] == 1600
    assert workload.baseline == {"batch_size": 64}


@pytest.mark.parametrize("args,message", [
    (["--trials", "0"], "--trials must be at least 1"),
    (["--timeout", "-5"], "--timeout must be a positive number"),
    (["--trial-timeout", "0"], "--trial-timeout must be a positive number"),
    (["--storage", "not a url"], "is not a storage URL"),
    (["--storage", "sqlite:////nonexistent-dir/x.db"], "does not exist"),
    (["--study", "bad name!"], "study name 'bad name!' is invalid"),
    (["--memory-cap", "lots"], "is not a size"),
    (["--sampler", "magic"], "--sampler 'magic' is unknown"),
    (["--space", "missing.yaml"], "no such file"),
    (["--train-samples", "0"], "--train-samples must be at least 1"),
    (["--ray-address", "127.0.0.1:1"], "cannot reach the Ray cluster at '127.0.0.1:1'"),
])
def test_bad_tune_arguments_exit_2_before_any_study(args, message, tmp_path, monkeypatch, capsys):
    from conftest import EXAMPLES

    monkeypatch.chdir(tmp_path)
    assert main(["tune", str(EXAMPLES / "digits_mlp.py"), *args]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "advisor.db").exists()


def test_export_on_empty_or_missing_storage(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["export", "--pick", "fastest"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "advisor.db").exists()


def test_export_to_unwritable_path_is_exit_2(tmp_path, capsys):
    from advisor.core.errors import ConfigError
    from advisor.outputs.export import write_export

    with pytest.raises(ConfigError, match="cannot write"):
        write_export({"advisor_config": 1, "config": {}}, tmp_path / "missing-dir" / "best.yaml")
    assert not (tmp_path / "missing-dir").exists()


def test_parse_size():
    assert parse_size("2GiB") == 2 * 2**30
    assert parse_size("500MiB") == 500 * 2**20
    assert parse_size("1.5g") == int(1.5 * 2**30)
    assert parse_size("1000") == 1000
    with pytest.raises(StudyError):
        parse_size("-1GiB")


@pytest.mark.parametrize("argv, said", [
    (["measure", "model.py", "--config", "best.yaml", "--no-tui"], "advisor measure: error: unrecognized arguments: --no-tui"),
    (["tune", "model.py", "--fast", "yes"], "advisor tune: error: unrecognized arguments: --fast yes"),
    (["--fast"], "advisor: error: unrecognized arguments: --fast"),
])
def test_an_unknown_flag_is_named_by_its_command(argv, said, tmp_path, monkeypatch, capsys):
    """A review met `advisor: error: unrecognized arguments` from `advisor measure`: the
    command's own parser says it, with that command's usage; exit status 2, nothing written."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and err.rstrip().endswith(said), err
    assert err.startswith(f"usage: {' '.join(['advisor', *argv[:1]]) if argv[0] != '--fast' else 'advisor'} ")
    assert list(tmp_path.iterdir()) == []
