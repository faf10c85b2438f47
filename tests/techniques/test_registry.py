"""A knob is declared in three places that must agree: its TrialConfig field (default and
domain, advisor/core/config.py), its technique module, and its place in
``registry.APPLY_ORDER``. These tests fail while they disagree, and hold the order's
reasons (each written beside its group in registry.py)."""

from __future__ import annotations

import inspect
import re
from dataclasses import fields
from pathlib import Path

import pytest

from advisor.core.config import DOMAINS, TrialConfig
from advisor.techniques._base import Technique
from advisor.techniques.registry import APPLY_ORDER, TECHNIQUES

PACKAGE = Path(inspect.getfile(Technique)).parent


def test_every_field_has_one_technique_and_every_technique_a_field():
    keys = [t.key for t in APPLY_ORDER]
    assert len(keys) == len(set(keys)), "a knob placed twice in APPLY_ORDER"
    # batch_size is the step itself (Prepared.loader and the search's own sampling), not a technique
    assert set(keys) == set(TrialConfig.keys()) - {"batch_size"}
    assert list(DOMAINS) == TrialConfig.keys()


@pytest.mark.parametrize("field", fields(TrialConfig), ids=lambda f: f.name)
def test_each_default_is_in_its_own_domain(field):
    assert DOMAINS[field.name].check(field.default) is None
    assert TrialConfig.from_dict({field.name: field.default}) == TrialConfig()


def test_each_knob_acts_or_names_the_knob_that_reads_it():
    own_apply = {t.key for t in APPLY_ORDER if type(t).apply is not Technique.apply}
    sources = "\n".join(p.read_text() for p in PACKAGE.glob("*.py"))
    for t in APPLY_ORDER:
        if t.read_by is None:
            assert t.key in own_apply, f"{t.key}: no apply of its own and no read_by naming the knob that reads it"
            continue
        assert t.key not in own_apply, f"{t.key}: has an apply of its own, yet says {t.read_by} reads it"
        assert t.read_by in own_apply, f"{t.key}: read_by {t.read_by!r}, which has no apply"
        assert re.search(rf"\.{t.key}\b", sources), f"{t.key}: no technique reads config.{t.key}"


def test_the_order_keeps_its_reasons():
    at = {key: i for i, key in enumerate(TECHNIQUES)}
    process = ("threads", "expandable_segments", "cudnn_benchmark", "sdpa_backend")
    assert max(at[k] for k in process) < at["precision"], "process settings come before the model is touched"
    chain = ["precision", "pruning", "quantization", "activation_checkpointing", "parallelism", "fused_optimizer",
             "compile"]
    assert [at[k] for k in chain] == sorted(at[k] for k in chain), f"the order must keep {' < '.join(chain)}"
    assert list(TECHNIQUES)[-1] == "compile", "compile traces the model as every other knob left it"
