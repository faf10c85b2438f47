"""A study whose training set is a stream (tests/workloads/streaming.py), end to end on
real Ray and SQLite: `advisor tune` says it streams, drops loader workers the stream
cannot use, trains each trial on the sample budget read from the stream; the exported
Python script trains on the stream and scores, in one process and as two DDP ranks."""

from __future__ import annotations

import subprocess
import sys

import optuna
import pytest

from advisor.cli.main import main
from advisor.core.stored import read_study

from conftest import WORKLOADS, torchrun_env
from recorded_study import write_recorded_study


@pytest.mark.ray
@pytest.mark.timeout(600)
def test_a_study_on_a_streaming_training_set_tunes_and_exports(ray_session, workdir, capsys):
    space = workdir / "stream.yaml"
    space.write_text("batch_size: {choices: [32, 64]}\nnum_workers: {choices: [0, 1, 2]}\n")
    code = main(["tune", str(WORKLOADS / "streaming.py"), "--space", str(space), "--trials", "3",
                 "--train-samples", "1536", "--no-tui"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "streaming train / 256 validation samples" in out
    assert "dropped num_workers=2: the training set is a stream that does not shard itself" in out
    study = optuna.load_study(study_name="streaming-stream", storage=f"sqlite:///{workdir / 'advisor.db'}")
    stored = read_study(study)
    assert stored.baseline is not None and stored.baseline.state == "complete"
    done = [r for r in stored.records if r.state == "complete"]
    assert len(done) >= 2
    for record in done:  # each trained on the budget, read from the stream in full batches
        assert record.attrs["train_samples"] == 1536
        assert record.config.num_workers in (0, 1)
    assert stored.baseline.figures.score > 0.4  # learnt the rule (chance: 0.25)

    script = workdir / "stream_train.py"
    assert main(["export", "--trial", str(stored.baseline.number), "--format", "python", "-o", str(script)]) == 0
    capsys.readouterr()
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=workdir)
    assert run.returncode == 0, run.stderr[-2000:]
    assert float(run.stdout.split("validation metric ")[1].split()[0]) > 0.4


@pytest.mark.timeout(300)
def test_the_exported_script_of_ddp_splits_the_stream_between_ranks_under_torchrun(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = write_recorded_study(url, trials=[({}, 1000.0, 1.0, 0.9), ({"parallelism": "ddp", "devices": 2}, 1500.0,
                                                                       1.0, 0.9)])
    study.set_user_attr("workload_path", str(WORKLOADS / "streaming.py"))
    study.set_user_attr("settings", {"train_samples": 2048, "seed": 0, "device": "cpu", "workload": "train"})
    script = tmp_path / "ddp_stream.py"
    assert main(["export", "--storage", url, "--trial", "1", "--format", "python", "-o", str(script)]) == 0
    assert "rank r keeps items r, r+2, r+4, ... of it" in script.read_text()
    capsys.readouterr()
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", str(script)],
                         env=torchrun_env(tmp_path), capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.count("validation metric") == 1
    assert float(run.stdout.split("validation metric ")[1].split()[0]) > 0.4  # learnt the rule (chance: 0.25)
