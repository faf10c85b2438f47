"""Faults inside a trial, on a real local Ray with real SQLite storage: OOM, a hard crash
of the worker (os.abort), a hang (the trial timeout fires), NaN loss, an exception in user
code, and a technique that refuses the model. Each becomes a recorded trial with its
failure class and message; the study continues and still produces a front."""

from __future__ import annotations

import optuna
import pytest

from advisor.cli.main import main

from conftest import EXAMPLES, WORKLOADS

pytestmark = pytest.mark.ray

FAST = ["--train-samples", "300"]


def load(db, name):
    return optuna.load_study(study_name=name, storage=f"sqlite:///{db}")


def test_faults_become_recorded_trials(ray_session, workdir, capsys):
    """OOM, user exception, NaN loss, hard crash and hang: each recorded, the study completes."""
    space = workdir / "faults.yaml"
    space.write_text("batch_size: {choices: [64, 16, 32, 128, 256, 512]}\nprecision: fp32\n")
    code = main(["tune", str(WORKLOADS / "faulty.py"), "--space", str(space), "--trials", "6",
                 "--trial-timeout", "12", "--sampler", "random", *FAST])  # the hang's cost; the others take ~2 s
    out = capsys.readouterr().out
    assert code == 0
    study = load(workdir / "advisor.db", "faulty-faults")
    by_bs = {t.user_attrs["config"]["batch_size"]: t for t in study.get_trials() if "duplicate_of" not in t.user_attrs}
    assert by_bs[64].state.name == "COMPLETE"
    expected = {512: "oom", 32: "error", 128: "error", 256: "crash", 16: "timeout"}
    assert {bs: by_bs[bs].user_attrs["failure_class"] for bs in expected} == expected
    assert "loss became nan" in by_bs[128].user_attrs["failure_message"]
    assert "Pareto front" in out and "5 failed" in out


def test_technique_refusing_the_model_is_recorded(ray_session, workdir, capsys):
    """channels_last on a model without 2-D convolutions: refused by the technique inside the
    trial (the preflight, which would have dropped the option, is skipped here)."""
    space = workdir / "refuse.yaml"
    space.write_text("batch_size: 64\nchannels_last: {choices: [false, true]}\n")
    code = main(["tune", str(EXAMPLES / "digits_mlp.py"), "--space", str(space), "--trials", "2",
                 "--skip-preflight", *FAST])
    out = capsys.readouterr().out
    assert code == 0
    study = load(workdir / "advisor.db", "digits_mlp-refuse")
    refused = [t for t in study.trials if t.user_attrs.get("config", {}).get("channels_last")]
    assert [t.user_attrs["failure_class"] for t in refused] == ["unsupported"]
    assert "2-D convolutions" in refused[0].user_attrs["failure_message"]
    assert "Pareto front" in out and "1 failed (1 unsupported)" in out


DIVERGES = '''import torch
from torch import nn
from torch.utils.data import TensorDataset

BASELINE = {"batch_size": 64}


def model():
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))


def datasets():
    x = torch.randn(512, 8, generator=torch.Generator().manual_seed(0))
    y = x[:, :3].argmax(1)
    return TensorDataset(x[:400], y[:400]), TensorDataset(x[400:], y[400:])


def loss(output, target):
    value = nn.functional.cross_entropy(output, target)
    return value if len(target) <= 2 else value * float("nan")  # finite on the preflight's two samples only
'''


def test_a_failed_baseline_leaves_no_study_and_the_fixed_file_runs_with_the_same_command(ray_session, workdir,
                                                                                       capsys):
    path = workdir / "model.py"
    path.write_text(DIVERGES)
    args = ["tune", str(path), "--trials", "1", "--no-confirm", *FAST]
    assert main(args) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "the baseline trial (bs=64 fp32) failed [error]: loss became nan" in err
    assert "The study held nothing else, so it was not kept: fix model.py and run the same command again" in err
    assert optuna.get_all_study_names(f"sqlite:///{workdir / 'advisor.db'}") == []
    path.write_text(DIVERGES.replace('value * float("nan")', "value"))
    assert main(args) == 0  # the same command, on the fixed file: a new study, not "a different workload_sha256"
    assert load(workdir / "advisor.db", "model-default").trials[0].state.name == "COMPLETE"


def test_a_baseline_failing_in_the_users_forward_says_so_below_its_traceback(ray_session, workdir, capsys):
    """A review read "ValueError: boom on the 2nd batch. The study held nothing else, ..." glued
    onto the last line of the user's traceback: the sentence now has a line of its own."""
    path = workdir / "model.py"
    path.write_text(DIVERGES.replace("    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))",
                                     "    return Raises()").replace('value * float("nan")', "value")
                    + '''

class Raises(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(8, 3)

    def forward(self, x):
        if len(x) > 2:  # the preflight's two samples pass
            raise ValueError("boom on a full batch")
        return self.layer(x)
''')
    assert main(["tune", str(path), "--trials", "1", "--no-confirm", *FAST]) == 1
    lines = capsys.readouterr().err.splitlines()
    at = lines.index("ValueError: boom on a full batch")
    assert lines[at - 1].strip() == 'raise ValueError("boom on a full batch")'  # the user's frame
    assert lines[at + 1] == ("The study held nothing else, so it was not kept: fix model.py and run the same "
                             "command again")
