"""A Lightning file tuned end to end on real Ray and SQLite (examples/lightning_digits.py),
exported in Lightning's terms, and the exported script run under Lightning's own Trainer."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from advisor.cli.main import main

from conftest import EXAMPLES, skip_without

pytestmark = pytest.mark.ray
skip_without("lightning")


def test_a_lightning_file_tunes_exports_and_runs_under_lightning(ray_session, workdir, capsys):
    space = workdir / "space.yaml"
    space.write_text("batch_size: 64\ngrad_accumulation: {choices: [1, 2]}\n")
    code = main(["tune", str(EXAMPLES / "lightning_digits.py"), "--space", str(space), "--trials", "2",
                 "--train-samples", "2048", "--train", "all", "--max-metric-drop", "100%", "--no-tui"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "Lightning: DigitsClassifier (training_step, validation_step logging 'val_acc'" in out
    assert "val_acc 0." in out and "accuracy 0." not in out

    accumulated = workdir / "acc.yaml"
    # the baseline (64, from the DataModule) and its one-knob seed: accumulation 2
    trials = [line for line in out.splitlines() if line.startswith("trial") and "grad_accumulation=2" in line]
    assert trials, out
    number = int(trials[0].split()[1])
    assert main(["export", "--trial", str(number), "-o", str(accumulated)]) == 0
    document = yaml.safe_load(accumulated.read_text())
    lightning = document["lightning"]
    batch = document["config"]["batch_size"]
    assert lightning["trainer"] == {"precision": "32-true", "accumulate_grad_batches": 2, "devices": 1}
    assert lightning["dataloader"]["batch_size"] == batch // 2  # per device, per accumulated batch
    assert document["lightning_parts"] == {"module": "DigitsClassifier()", "data": "DigitsData()"}

    script = workdir / "train_lit.py"
    assert main(["export", "--trial", str(number), "--format", "python", "-o", str(script)]) == 0
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=workdir)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "val_acc" in run.stdout  # Lightning's own validation table
