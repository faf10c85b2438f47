"""What the techniques see of a model: its blocks (repeated layers, else top-level
children, containers entered) and its tied parameters."""

from __future__ import annotations

import torch
from torch import nn

from advisor.techniques.parallelism import fsdp_units
from advisor.workload.contract import load_workload
from advisor.workload.structure import blocks, tied_parameters

from conftest import EXAMPLES, WORKLOADS


def test_a_models_repeated_layers_are_its_blocks():
    tied = load_workload(WORKLOADS / "tied_lm.py").model()
    assert blocks(tied) == list(tied.body.layers)  # inside a wrapper, inside a ModuleList
    char_lm = load_workload(EXAMPLES / "char_lm.py").model()
    assert blocks(char_lm) == list(char_lm.blocks)


def test_without_repeated_layers_the_top_level_children_are_the_blocks():
    mlp = load_workload(EXAMPLES / "digits_mlp.py").model()  # a Sequential of plain layers
    assert blocks(mlp) == [m for m in mlp.children() if any(True for _ in m.parameters())]
    heads = nn.Module()
    heads.parts = nn.ModuleList([nn.Linear(4, 4), nn.Conv1d(4, 4, 1)])  # a container: its elements
    heads.out = nn.Linear(4, 2)
    assert blocks(heads) == [heads.parts[0], heads.parts[1], heads.out]


def test_tied_parameters_stay_with_the_fsdp_root():
    tied = load_workload(WORKLOADS / "tied_lm.py").model()
    assert tied_parameters(tied) == {id(tied.head.weight)}
    assert fsdp_units(tied) == list(tied.body.layers)
    flat = nn.Sequential(nn.Embedding(8, 4), nn.Linear(4, 8))
    flat[1].weight = flat[0].weight
    assert fsdp_units(flat) == [] and tied_parameters(flat) == {id(flat[0].weight)}
    assert tied_parameters(nn.Linear(2, 2)) == set()
    assert torch.equal(tied.head.weight, tied.body.embed.weight)
