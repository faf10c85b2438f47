"""Lightning files (a LightningModule and a LightningDataModule, no model.py glue) with the
real `lightning` package: read as written, validated as Lightning validates, schedules
stepped as Lightning steps them, every knob in real trials, and bad files refused."""

from __future__ import annotations

import pytest
import torch

from advisor.core.config import TrialConfig
from advisor.core.results import TrialPayload, TrialSettings
from advisor.trial.entry import run_trial
from advisor.workload.contract import forward, load_workload
from advisor.workload.preflight import preflight

from conftest import EXAMPLES, exit_status, run_as_trial, skip_without, write_model

skip_without("lightning")

EXAMPLE = EXAMPLES / "lightning_digits.py"

# A small Lightning file; tests swap its parts for broken ones.
HEADER = '''
import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
'''
MODULE = '''
class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
        self.lrs = []

    def forward(self, x):
        return self.layer(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.lrs.append(self.opt.param_groups[0]["lr"])  # the rate this step uses
        return nn.functional.cross_entropy(self(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self(x), y))
        self.log("val_acc", (self(x).argmax(-1) == y).float().mean())

    def configure_optimizers(self):
        self.opt = torch.optim.SGD(self.parameters(), lr=0.5)
        return [self.opt], [
            {"scheduler": torch.optim.lr_scheduler.StepLR(self.opt, 1, gamma=0.5), "interval": "epoch", "frequency": 2},
            {"scheduler": torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: 1 / (1 + s)), "interval": "step",
             "frequency": 3},
        ]
'''
DATA = '''
class Data(L.LightningDataModule):
    def setup(self, stage=None):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(48, 8, generator=g)
        y = x[:, :3].argmax(1)
        self.train_set, self.val_set = TensorDataset(x[:40], y[:40]), TensorDataset(x[40:], y[40:])

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=8)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=8)
'''
METRIC = '\nMETRIC = {"name": "val_acc", "higher_is_better": True}\n'


def lightning_file(tmp_path, module=MODULE, data=DATA, extra=METRIC, name="lit.py"):
    return write_model(tmp_path, HEADER + module + data + extra, name)


def test_a_lightning_file_is_read_as_written():
    workload = load_workload(EXAMPLE)
    assert workload.kind == "lightning" and workload.metric_spec.name == "val_acc"
    assert workload.where("optimizer").endswith("DigitsClassifier.configure_optimizers()")
    facts = preflight(workload)
    assert (facts["train_size"], facts["val_size"]) == (1437, 360)
    assert workload.baseline == {"batch_size": 64}  # the DataModule's own batch size
    assert facts["notes"][0].startswith("Lightning: DigitsClassifier")
    assert facts["top_level_blocks"] == 6  # the layers inside the step and the module's Sequential


def test_baseline_in_the_file_wins_over_the_dataloaders(tmp_path):
    workload = load_workload(lightning_file(tmp_path, extra=METRIC + 'BASELINE = {"batch_size": 16}\n'))
    preflight(workload)
    assert workload.baseline == {"batch_size": 16}


def _our_run(workload, batch_size, steps):
    """The trial loop's pieces on one process: datasets, the step, its trainer, the optimizer."""
    from advisor import apply
    from advisor.trial.shared import training_batches

    train, val = workload.datasets()
    step = workload.model()
    prepared = apply(step, {"batch_size": batch_size}, device="cpu")
    workload.start_trial(batch_size=batch_size, accumulation=1, rank=0, world=1, precision="fp32",
                         train_samples=steps * batch_size)
    optimizer = workload.optimizer(prepared.module.parameters())
    return train, val, step, prepared, optimizer, training_batches(prepared, workload, train, 0)


def test_schedulers_step_as_lightning_steps_them(tmp_path):
    """Two schedulers on one optimizer (every 2 epochs; every 3 optimizer steps) give the
    same learning rate at every step as under Lightning's own Trainer."""
    import lightning as L

    path = lightning_file(tmp_path)
    workload = load_workload(path)
    _, _, step, prepared, optimizer, batches = _our_run(workload, batch_size=8, steps=17)
    for _ in range(17):  # 5 steps an epoch: past 3 epoch ends
        x, y = next(batches)
        prepared.train_step(x, y, workload.loss, optimizer)
    ours = step.lit.lrs

    module = workload.module
    lit = module.Net()
    L.Trainer(max_steps=17, accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
              enable_model_summary=False, limit_val_batches=0, num_sanity_val_steps=0).fit(lit, module.Data())
    assert len(ours) == len(lit.lrs) == 17
    assert ours == pytest.approx(lit.lrs, rel=1e-12)
    assert len(set(ours)) > 4  # both schedules moved the rate


def test_the_metric_is_what_lightning_validate_reports():
    """validation_step's values over the epoch (a torchmetrics Metric, and a mean over
    batches of another size) agree with Trainer.validate on the same weights."""
    import lightning as L

    workload = load_workload(EXAMPLE)
    _, val, step, prepared, optimizer, batches = _our_run(workload, batch_size=32, steps=45)
    for _ in range(45):  # one epoch and a step: the torchmetrics state must not carry training's
        x, y = next(batches)
        prepared.train_step(x, y, workload.loss, optimizer)
    step.eval()
    with torch.no_grad():
        ours = workload.validate(lambda x: forward(step, x), prepared.loader(val, collate_fn=workload.collate))
    logged = dict(step.lit.trainer.callback_metrics)

    lit = step.lit
    for name in ("log", "log_dict", "_trainer"):  # back to a plain LightningModule
        lit.__dict__.pop(name, None)
    lit._trainer = None
    [theirs] = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False,
                         enable_model_summary=False).validate(lit, datamodule=workload.module.DigitsData())
    assert ours == pytest.approx(theirs["val_acc"], abs=1e-6)
    assert logged["val_loss"] == pytest.approx(theirs["val_loss"], rel=1e-5)
    assert 0.3 < ours < 1.0


@pytest.mark.parametrize("config", [
    {"batch_size": 64},
    {"batch_size": 64, "precision": "bf16", "activation_checkpointing": True},
    {"batch_size": 64, "grad_accumulation": 2, "quantization": "qat_int8"},
    {"batch_size": 64, "parallelism": "ddp", "devices": 2, "pruning": "ln_structured", "prune_amount": 0.25},
    {"batch_size": 64, "parallelism": "fsdp", "devices": 2},
    {"batch_size": 64, "compile": True},
], ids=["plain", "bf16-checkpointing", "accumulation-qat", "ddp-pruning", "fsdp", "compile"])
def test_each_knob_trains_a_lightning_module(config):
    payload = TrialPayload.of(load_workload(EXAMPLE), TrialConfig(**config),
                              TrialSettings(train_samples=1500, max_timing_s=0.5))
    result = run_as_trial(payload)
    assert result.ok, result.failure_message
    assert result.throughput > 0 and result.score > 0.5  # val_acc after ~1 epoch beats chance (0.1)


def test_a_step_that_raises_fails_the_trial_in_the_users_frames(tmp_path):
    module = MODULE.replace("        x, y = batch\n        self.lrs", "        x, y = batch\n        if batch_idx == 3:\n"
                            "            raise ValueError('bad batch 3')\n        self.lrs")
    payload = TrialPayload.of(load_workload(lightning_file(tmp_path, module=module)), TrialConfig(batch_size=8),
                              TrialSettings(train_samples=80, max_timing_s=0.5))
    result = run_trial(payload)
    assert (result.ok, result.failure_class) == (False, "error")
    assert "bad batch 3" in result.failure_message and "lit.py" in result.failure_message
    assert "advisor/" not in result.failure_message


BAD = [
    ("no-training-step", dict(module=MODULE.replace("def training_step", "def other_step")),
     "Net has no training_step (it gives the loss)"),
    ("no-validation-step", dict(module=MODULE.replace("def validation_step", "def other_step")),
     "Net has no validation_step (it logs the metric)"),
    ("empty-train", dict(data=DATA.replace("TensorDataset(x[:40], y[:40])", "TensorDataset(x[:0], y[:0])")),
     "Data.train_dataloader(): its dataset is empty"),
    ("empty-val", dict(data=DATA.replace("TensorDataset(x[40:], y[40:])", "TensorDataset(x[:0], y[:0])")),
     "Data.val_dataloader(): its dataset is empty"),
    ("no-metric-two-scores", dict(extra="", module=MODULE.replace('"val_loss"', '"val_f1"')),
     "validation_step logs 'val_f1', 'val_acc': which is the study's metric is ambiguous; add METRIC"),
    ("no-metric-direction-unknown", dict(extra="", module=MODULE.replace(
        'self.log("val_loss", nn.functional.cross_entropy(self(x), y))', 'self.log("val_thing", 1.0)').replace(
        '        self.log("val_acc", (self(x).argmax(-1) == y).float().mean())\n', "")),
     "the metric is 'val_thing' (the one value validation_step logs), but its name does not say whether higher"),
    ("no-metric-built-names", dict(extra="", module=MODULE.replace('self.log("val_loss", ', 'self.log(f"val_{0}", ')),
     "validation_step logs 'val_acc' and names it builds at run time: which is the study's metric is ambiguous"),
    ("metric-not-a-dict", dict(extra='\nMETRIC = "val_acc"\n'), "METRIC names the value validation_step logs"),
    ("metric-not-logged", dict(extra='\nMETRIC = {"name": "val_f1"}\n'),
     "validation_step did not log 'val_f1' (METRIC['name']); it logged: val_acc, val_loss"),
    ("two-optimizers", dict(module=MODULE.replace("return [self.opt], [", "return [self.opt, torch.optim.SGD("
                                                  "self.parameters(), lr=0.1)], [")),
     "gave 2 optimizers"),
    ("manual-optimization", dict(module=MODULE.replace("self.lrs = []", "self.lrs = []\n        "
                                                       "self.automatic_optimization = False")),
     "uses manual optimization"),
    ("loss-function-too", dict(extra=METRIC + "\ndef loss(output, target):\n    return output.sum()\n"),
     "loss() is not used in a Lightning file"),
    ("two-modules", dict(module=MODULE + MODULE.replace("class Net(", "class Other(")),
     "needs exactly one LightningModule class, or model() returning the one to tune; found Net, Other"),
    ("iterable-data", dict(data=DATA.replace("return DataLoader(self.train_set, batch_size=8)",
                                             "return DataLoader(Stream(), batch_size=8)")
                           + "\nclass Stream(torch.utils.data.IterableDataset):\n    def __iter__(self):\n"
                             "        return iter([])\n"),
     "its dataset is a stream (Stream) that yielded nothing"),
    ("step-returns-none", dict(module=MODULE.replace("return nn.functional.cross_entropy(self(x), y)", "return None")),
     "training_step returned None"),
]


@pytest.mark.parametrize("parts,message", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_lightning_files_exit_2_naming_the_problem(tmp_path, workdir, capsys, parts, message):
    path = lightning_file(tmp_path, **parts)
    assert exit_status(["tune", str(path), "--no-tui", "--trials", "2"]) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert not (workdir / "advisor.db").exists()  # nothing written


CALLBACKS = """    def configure_callbacks(self):
        return [L.pytorch.callbacks.ModelCheckpoint(monitor="val_loss", mode="min")]

    def configure_optimizers(self):"""
INFERRED = [
    ("a-score-beside-a-loss", {}, ("val_acc", True, True), "the one score validation_step logs (besides 'val_loss')"),
    ("one-loss", dict(module=MODULE.replace('        self.log("val_acc", (self(x).argmax(-1) == y).float().mean())\n',
                                            "")),
     ("val_loss", False, False), "the one value validation_step logs, lower is better"),
    ("a-monitored-value", dict(module=MODULE.replace("    def configure_optimizers(self):", CALLBACKS)),
     ("val_loss", False, False), "the value the file monitors (monitor='val_loss')"),
    ("log-dict", dict(module=MODULE.replace('self.log("val_loss", nn.functional.cross_entropy(self(x), y))',
                                            'self.log_dict({"val_perplexity": torch.tensor(2.0)})').replace(
        '        self.log("val_acc", (self(x).argmax(-1) == y).float().mean())\n', "")),
     ("val_perplexity", False, False), "the one value validation_step logs"),
]


@pytest.mark.parametrize("parts,expected,how", [i[1:] for i in INFERRED], ids=[i[0] for i in INFERRED])
def test_without_metric_the_metric_is_read_from_what_validation_logs(tmp_path, parts, expected, how):
    """No METRIC line: the logged value, its direction from its name or the monitor's mode,
    said in the preflight's notes; the metric is then measured as with METRIC."""
    workload = load_workload(lightning_file(tmp_path, extra="", **parts))
    spec = workload.metric_spec
    assert (spec.name, spec.higher_is_better, spec.fraction) == expected
    notes = preflight(workload)["notes"]  # (it measures the metric on a validation batch)
    assert any(f"the file has no METRIC; the study's metric is {expected[0]!r}: {how}" in n for n in notes), notes


def test_a_base_class_and_its_subclass_are_one_module(tmp_path):
    """A file with a base LightningModule and the one derived from it tunes the derived one."""
    module = MODULE.replace("class Net(L.LightningModule):", "class Base(L.LightningModule):\n    pass\n\n\n"
                            "class Net(Base):")
    workload = load_workload(lightning_file(tmp_path, module=module))
    assert workload.names["model"] == "Net()"
    preflight(workload)


def test_factories_instead_of_classes(tmp_path):
    """model() and datamodule() returning the module and the data, as the usual functions."""
    extra = METRIC + "\ndef model():\n    return Net()\n\n\ndef datamodule():\n    return Data()\n"
    workload = load_workload(lightning_file(tmp_path, extra=extra))
    assert workload.names["model"] == "model()" and workload.names["datamodule"] == "datamodule()"
    assert preflight(workload)["train_size"] == 40


def test_a_plain_model_py_with_a_lightning_module_keeps_the_plain_contract(tmp_path):
    """model() returning a LightningModule beside datasets(): the plain contract (forward, loss)."""
    text = HEADER + MODULE + '''
def model():
    return Net()


def datasets():
    x = torch.randn(32, 8)
    return TensorDataset(x, x[:, :3].argmax(1)), TensorDataset(x, x[:, :3].argmax(1))
'''
    workload = load_workload(write_model(tmp_path, text))
    assert workload.kind == "model.py"
