"""`advisor measure`: an exported config measured again in fresh trials (real Ray, the
digits MLP), compared with the stored figures; bad input refused before anything runs."""

from __future__ import annotations

import json

import pytest
import yaml

from advisor.cli.main import main

from conftest import EXAMPLES
from recorded_study import write_recorded_study

MLP = str(EXAMPLES / "digits_mlp.py")


@pytest.fixture
def exported(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = write_recorded_study(url)
    study.set_user_attr("workload_path", MLP)
    study.set_user_attr("settings", {"train_samples": 1437, "seed": 0, "device": "cpu", "workload": "train"})
    path = tmp_path / "bf16.yaml"
    assert main(["export", "--storage", url, "--trial", "1", "-o", str(path)]) == 0
    capsys.readouterr()
    return path


@pytest.mark.ray
def test_measure_runs_fresh_trials_and_compares(ray_session, exported, capsys):
    assert main(["measure", MLP, "--config", str(exported), "--repeats", "2", "--json"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert len(data["runs"]) == 2 and all(r["ok"] for r in data["runs"])
    assert data["config"]["precision"] == "bf16" and data["source"]["trial"] == 1
    thr = data["figures"]["throughput"]
    assert thr["stored"] == 10240.0 and len(thr["values"]) == 2
    assert thr["low"] <= thr["median"] <= thr["high"]
    assert thr["within"] == (thr["low"] <= 10240.0 <= thr["high"])
    assert data["figures"]["accuracy"]["difference"] == pytest.approx(
        data["figures"]["accuracy"]["median"] - 0.9639)
    # the recorded study names another file (and hash) than the MLP measured now: said so
    assert any("is not the file the config was measured with" in n for n in data["notes"])
    assert captured.err.count("samples/s") == 2  # one progress line per run


@pytest.mark.parametrize("change, message", [
    (lambda d: d["config"].update(precision="fp64"), "config.precision: expected one of"),
    (lambda d: d["config"].update(warp_speed=True), "config.warp_speed: unknown key"),
    (lambda d: d.update(advisor_config=99), "advisor_config is 99"),
    (lambda d: (d["source"].update(workload_kind="inference"), d["config"].update(activation_checkpointing=True)),
     "cannot run as a inference workload: activation_checkpointing=True only applies to training"),
])
def test_bad_config_is_refused_before_anything_runs(exported, capsys, change, message):
    document = yaml.safe_load(exported.read_text())
    document["config"].update(pin_memory=False)
    change(document)
    exported.write_text(yaml.safe_dump(document))
    assert main(["measure", MLP, "--config", str(exported)]) == 2
    assert message in capsys.readouterr().err


def test_missing_files_and_bad_repeats_exit_2(exported, tmp_path, capsys):
    assert main(["measure", MLP, "--config", str(tmp_path / "none.yaml")]) == 2
    assert "cannot read config file" in capsys.readouterr().err
    assert main(["measure", str(tmp_path / "none.py"), "--config", str(exported)]) == 2
    assert "none.py" in capsys.readouterr().err
    assert main(["measure", MLP, "--config", str(exported), "--repeats", "0"]) == 2
    assert "--repeats must be at least 1" in capsys.readouterr().err
