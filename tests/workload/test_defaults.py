"""The contract's default loss and metric read outputs as libraries return them, and a
model that computes its own loss says so with LOSS = "output.loss"."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from advisor.cli.main import main
from advisor.workload.contract import load_workload
from advisor.workload.defaults import default_loss, default_metric
from advisor.workload.preflight import preflight

from conftest import write_model


class Output(dict):
    """Shaped like transformers' ModelOutput: a dict whose keys are also attributes."""

    def __getattr__(self, name):
        return self[name]


def test_scores_per_sample_as_before():
    scores, target = torch.tensor([[2.0, 0.0], [0.0, 1.0], [3.0, 0.0]]), torch.tensor([0, 1, 1])
    assert default_loss(scores, target) == F.cross_entropy(scores, target)
    assert default_metric(scores, target) == pytest.approx(2 / 3)


@pytest.mark.parametrize("wrap", [lambda s: {"logits": s}, lambda s: Output(logits=s, loss=None),
                                  lambda s: type("O", (), {"logits": s})()], ids=["dict", "model-output", "object"])
def test_the_logits_of_an_output(wrap):
    scores, target = torch.randn(4, 3), torch.tensor([0, 1, 2, 0])
    assert default_loss(wrap(scores), target) == F.cross_entropy(scores, target)
    assert default_metric(wrap(scores), target) == default_metric(scores, target)


def test_scores_per_position_classes_last_and_ignored_targets():
    """A language model: (batch, positions, vocabulary) against (batch, positions); -100 left out."""
    scores = torch.zeros(2, 3, 5)
    scores[..., 1] = 1.0  # predicts token 1 everywhere
    target = torch.tensor([[1, 1, -100], [1, 2, -100]])
    assert default_metric(scores, target) == pytest.approx(3 / 4)
    flat = F.cross_entropy(scores.reshape(-1, 5)[target.reshape(-1) != -100], target[target != -100])
    torch.testing.assert_close(default_loss(scores, target), flat)


def test_scores_with_the_classes_second():
    """Segmentation: (batch, classes, height, width) against (batch, height, width)."""
    scores, target = torch.randn(2, 4, 3, 3), torch.randint(0, 4, (2, 3, 3))
    torch.testing.assert_close(default_loss(scores, target), F.cross_entropy(scores, target))
    expected = (scores.argmax(1) == target).float().mean().item()
    assert default_metric(scores, target) == pytest.approx(expected)


SELF_LOSS = """
import torch
from torch.utils.data import TensorDataset
LOSS = "output.loss"
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 2)
    def forward(self, x, labels=None):
        logits = self.fc(x)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = torch.nn.functional.cross_entropy(logits, labels) * 1.0
        return out
def model():
    return M()
def datasets():
    x = torch.randn(64, 4); y = torch.randint(0, 2, (64,))
    data = [({"x": a, "labels": b}, b) for a, b in zip(x, y)]
    return data, data
"""


def test_a_model_that_returns_its_own_loss(tmp_path):
    wl = load_workload(write_model(tmp_path, SELF_LOSS))
    assert preflight(wl)["train_size"] == 64
    x, y = torch.randn(3, 4), torch.tensor([0, 1, 1])
    out = wl.model()(x=x, labels=y)
    assert wl.loss(out, y) is out["loss"]


@pytest.mark.parametrize("body,expected", [
    (SELF_LOSS.replace('LOSS = "output.loss"', 'LOSS = "mse"'), 'LOSS must be "output.loss"'),
    (SELF_LOSS + "def loss(o, t):\n    return o['loss']\n", "both loss() and LOSS"),
    (SELF_LOSS.replace('({"x": a, "labels": b}, b)', '({"x": a}, b)'), "without a loss (give the model its labels"),
], ids=["unknown-value", "both", "no-labels"])
def test_a_bad_loss_declaration_exits_2_and_writes_nothing(workdir, capsys, body, expected):
    path = write_model(workdir, body)
    assert main(["tune", str(path), "--trials", "2"]) == 2
    err = capsys.readouterr().err
    assert expected in err and str(path) in err
    assert not (workdir / "advisor.db").exists()
