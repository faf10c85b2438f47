"""`advisor export --format python`: the script runs as exported (one process, and
under torchrun for DDP) and its plain-PyTorch block names every non-default knob."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from advisor.cli.main import main
from advisor.core.config import TrialConfig
from advisor.outputs.python_script import plain_pytorch

from conftest import EXAMPLES, torchrun_env
from recorded_study import write_recorded_study


@pytest.fixture
def study_url(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = write_recorded_study(url)
    study.set_user_attr("workload_path", str(EXAMPLES / "digits_mlp.py"))  # a real model.py to run
    study.set_user_attr("settings", {"train_samples": 1437, "seed": 0, "device": "cpu", "workload": "train"})
    return url


def _export(url, trial, path, capsys):
    assert main(["export", "--storage", url, "--trial", str(trial), "--format", "python", "-o", str(path)]) == 0
    return capsys.readouterr().out


def test_python_export_runs_and_scores(study_url, tmp_path, capsys):
    path = tmp_path / "fast.py"
    out = _export(study_url, 1, path, capsys)
    assert f"run it:    python {path}" in out
    text = path.read_text()
    ast.parse(text)
    assert "'precision': 'bf16'" in text and "10,240 samples/s (1.52x the baseline, unconfirmed)" in text
    assert "# precision = 'bf16'" in text and "torch.autocast(device_type, dtype=torch.bfloat16)" in text
    run = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    score = float(run.stdout.split("validation metric ")[1].split()[0])
    assert score > 0.5  # one epoch of the MLP on digits (chance: 0.1)


def test_python_export_of_ddp_runs_under_torchrun(study_url, tmp_path, capsys):
    path = tmp_path / "ddp.py"
    out = _export(study_url, 6, path, capsys)
    assert f"torchrun --nproc-per-node=2 {path}" in out
    text = path.read_text()
    assert "DistributedDataParallel" in text and "fp16_compress_hook" in text
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", str(path)],
                         env=torchrun_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.count("validation metric") == 1  # printed by rank 0 only


@pytest.mark.parametrize("changes, needle", [
    ({"parallelism": "tp", "devices": 2}, "parallelize_module"),
    ({"parallelism": "pp", "devices": 2, "pp_schedule": "gpipe", "pp_microbatches": 4}, "ScheduleGPipe"),
], ids=["tp", "pp"])
def test_python_export_of_model_parallelism_runs_under_torchrun(tmp_path, capsys, changes, needle):
    """Tensor and pipeline parallelism as exported: every rank of the TP group loads the
    same batches; the pipeline's last stage prints the metric."""
    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = write_recorded_study(url, trials=[({}, 6736.0, 98.6, 0.9667), (changes, 5100.0, 90.0, 0.9611)])
    study.set_user_attr("workload_path", str(EXAMPLES / "digits_mlp.py"))
    study.set_user_attr("settings", {"train_samples": 1437, "seed": 0, "device": "cpu", "workload": "train"})
    path = tmp_path / "split.py"
    assert f"torchrun --nproc-per-node=2 {path}" in _export(url, 1, path, capsys)
    assert needle in path.read_text()
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", str(path)],
                         env=torchrun_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.count("validation metric") == 1
    assert float(run.stdout.split("validation metric ")[1].split()[0]) > 0.5  # an epoch of the MLP (chance: 0.1)


def test_plain_pytorch_block_covers_each_changed_knob():
    config = TrialConfig(batch_size=128, precision="fp16", channels_last=True, compile=True,
                         compile_mode="max-autotune", pruning="l1_unstructured", prune_amount=0.3,
                         activation_checkpointing=True, grad_accumulation=2, threads=4)
    text = plain_pytorch(config)
    for needle in ("GradScaler", "channels_last", "mode='max-autotune'", "amount=0.3", "checkpoint(",
                   "chunk(2)", "set_num_threads(4)", "batch_size=128"):
        assert needle in text, needle
    assert "model = torch.compile(model)\n" not in text  # the mode line replaces the plain one
    assert all(line.startswith("#") for line in text.splitlines())  # comments: the script still runs
    plain = plain_pytorch(TrialConfig())
    assert "precision" not in plain and "launch: python train.py" in plain


def test_python_export_refuses_a_failed_trial(study_url, tmp_path, capsys):
    path = tmp_path / "x.py"
    assert main(["export", "--storage", study_url, "--trial", "8", "--format", "python", "-o", str(path)]) == 2
    assert "did not complete (oom)" in capsys.readouterr().err
    assert not path.exists()


def test_an_infeasible_trial_is_exported_with_a_warning_and_says_so(study_url, tmp_path, capsys):
    """A review exported trial 3 of its study, 19 points below the baseline against a
    10-point limit: exit 0, not a word; the script's header read "-19.0 pt"."""
    import yaml

    assert main(["export", "--storage", study_url, "--trial", "5", "-o", str(tmp_path / "x.yaml")]) == 0
    said = capsys.readouterr()
    assert "note: trial 5 is infeasible in study" in said.err and "exported as measured" in said.err
    assert "wrote trial 5" in said.out
    assert yaml.safe_load((tmp_path / "x.yaml").read_text())["measured"]["feasible"] is False
    assert main(["export", "--storage", study_url, "--trial", "5", "--format", "python", "-o",
                 str(tmp_path / "x.py")]) == 0
    assert "note: trial 5 is infeasible" in capsys.readouterr().err
    assert "INFEASIBLE in its study: " in (tmp_path / "x.py").read_text()
    assert main(["export", "--storage", study_url, "--trial", "1", "-o", str(tmp_path / "y.yaml")]) == 0
    assert "infeasible" not in capsys.readouterr().err
    assert "feasible" not in yaml.safe_load((tmp_path / "y.yaml").read_text())["measured"]  # as it always was


BLOCKS = '''import torch
from torch import nn


class Tagger(nn.Module):
    """Tags each position of a token sequence; returns its scores as `logits` in a dict."""

    def __init__(self, own_loss=False):
        super().__init__()
        self.embed, self.head, self.own_loss = nn.Embedding(16, 32), nn.Linear(32, 4), own_loss

    def forward(self, input_ids, labels=None):
        logits = self.head(self.embed(input_ids))
        out = {"logits": logits}
        if self.own_loss:
            out["loss"] = nn.functional.cross_entropy(logits.reshape(-1, 4), labels.reshape(-1), ignore_index=-100)
        return out
'''

TAGGER = '''import torch
from torch.utils.data import Dataset

from blocks import Tagger  # a module beside model.py

BASELINE = {{"batch_size": 16}}
{loss}

class Tokens(Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randint(0, 16, (n, 12), generator=g)
        self.y = self.x % 4
        self.y[:, :2] = -100  # positions that count in neither the loss nor the metric

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {{"input_ids": self.x[i]{labels}}}, self.y[i]


def model():
    return Tagger(own_loss={own_loss})


def datasets():
    return Tokens(256, 0), Tokens(64, 1)
'''


@pytest.mark.parametrize("own_loss", [False, True], ids=["default-loss-on-logits", "LOSS-output.loss"])
def test_python_export_runs_the_trials_loss_and_metric_and_model_pys_own_imports(study_url, tmp_path, capsys,
                                                                               own_loss):
    """The script trains and scores as the trials did: the default loss and metric read a dict
    output's `logits` per position and leave out -100 targets, `LOSS = "output.loss"` uses the
    model's own loss, and model.py imports a module beside it (found from anywhere)."""
    import optuna

    project = tmp_path / "project"
    project.mkdir()
    (project / "blocks.py").write_text(BLOCKS)
    (project / "model.py").write_text(TAGGER.format(
        loss='LOSS = "output.loss"' if own_loss else "", own_loss=own_loss,
        labels=', "labels": self.y[i]' if own_loss else ""))
    study = optuna.load_study(study_name=optuna.get_all_study_names(study_url)[0], storage=study_url)
    study.set_user_attr("workload_path", str(project / "model.py"))
    study.set_user_attr("settings", {"train_samples": 256, "seed": 0, "device": "cpu", "workload": "train"})
    path = tmp_path / "elsewhere" / "tagger.py"
    path.parent.mkdir()
    _export(study_url, 1, path, capsys)
    run = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    score = float(run.stdout.split("validation metric ")[1].split()[0])
    assert 0.0 <= score <= 1.0 and "(64 samples)" in run.stdout  # weighted by samples, not by a dict's keys


def test_a_file_name_with_a_space_is_quoted_where_a_shell_reads_it(study_url, tmp_path, capsys):
    """A reviewer pasted the printed `run it:` line for `-o "x v10.py"`: the shell split it."""
    import shlex

    path = tmp_path / "x v10.py"
    out = _export(study_url, 1, path, capsys)
    line = next(x for x in out.splitlines() if x.startswith("run it:"))
    assert shlex.split(line.split(":", 1)[1]) == ["python", str(path)]
    assert "Run it:  python 'x v10.py'" in path.read_text()  # the script's own name, beside it


def test_an_export_scores_a_trial_at_its_seed_mean(study_url, tmp_path, capsys):
    """measured.score is the score the study compares: trial 1 trained with three seeds reads
    at their mean (a review read the first seed's 0.8333 beside the metric's 0.8370)."""
    import optuna
    import yaml

    from advisor.core.study_metric import METRIC_SEEDS

    study = optuna.load_study(study_name="digits_cnn-cpu", storage=study_url)
    study.set_user_attr(f"{METRIC_SEEDS}1", {"seeds": [0, 1, 2], "values": [0.9639, 0.9500, 0.9600]})
    assert main(["export", "--storage", study_url, "--trial", "1", "-o", str(tmp_path / "x.yaml")]) == 0
    measured = yaml.safe_load((tmp_path / "x.yaml").read_text())["measured"]
    assert abs(measured["score"] - 0.9579667) < 1e-6 and measured["metric"]["value"] == measured["score"]


def test_the_scripts_header_gives_the_metric_its_delta_is_of():
    """A review saw 'accuracy 0.1000 (+0.1 pt)' against a baseline of 0.1269: the value was
    the trial's seed-0 score, the delta its seed mean's (0.1278). The header now gives the
    seed mean the delta is of."""
    from advisor.outputs.python_script import _measured_line

    document = {"measured": {"throughput": 1000.0, "peak_memory_bytes": 2**20, "score": 0.1,
                             "metric": {"name": "accuracy", "higher_is_better": True, "fraction": True, "unit": "",
                                        "value": 0.1278},
                             "vs_baseline": {"throughput_ratio": 1.2, "memory_ratio": 0.9, "metric_delta": 0.0009}}}
    line = _measured_line(document)
    assert "accuracy 0.1278 (+0.1 pt)." in line and "0.1000" not in line
    mse = {"measured": {"throughput": 1000.0, "peak_memory_bytes": 2**20, "score": -2.5,
                        "metric": {"name": "mse", "higher_is_better": False, "fraction": False, "unit": "",
                                   "value": 2.25},
                        "vs_baseline": {"metric_delta": 0.1}}}
    assert "mse 2.25 (" in _measured_line(mse)  # lower is better: the value as itself
    del document["measured"]["metric"]["value"]  # an older export: the score it has
    assert "accuracy 0.1000" in _measured_line(document)
