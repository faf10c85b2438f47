"""A Hugging Face transformers model under the plain model.py contract (examples/hf_gpt2.py:
a GPT-2 built from a config, LOSS = "output.loss", the default metric on its logits):
preflight, a trial, and the knobs that touch its structure (FSDP with its tied output
layer, activation checkpointing of its layers), with the real library."""

from __future__ import annotations

import pytest

from advisor.core.config import TrialConfig
from advisor.core.results import TrialPayload, TrialSettings
from advisor.trial.entry import run_trial
from advisor.workload.contract import load_workload
from advisor.workload.preflight import preflight
from advisor.workload.structure import blocks

from conftest import EXAMPLES

pytest.importorskip("transformers")
GPT2 = EXAMPLES / "hf_gpt2.py"


def test_preflight_and_the_layers_the_knobs_see():
    wl = load_workload(GPT2)
    facts = preflight(wl)
    assert (facts["train_size"], facts["val_size"]) == (2048, 256)
    model = wl.model()
    assert blocks(model) == list(model.transformer.h)  # its two GPT2Blocks


@pytest.mark.parametrize("config", [
    {"batch_size": 16},
    {"batch_size": 16, "activation_checkpointing": True, "precision": "bf16"},
    {"batch_size": 16, "parallelism": "fsdp", "devices": 2},
], ids=["plain", "checkpointing-bf16", "fsdp"])
def test_a_transformers_model_trains_under_the_knobs(config):
    payload = TrialPayload.of(load_workload(GPT2), TrialConfig(**config),
                              TrialSettings(train_samples=1024, max_timing_s=1.0))
    result = run_trial(payload)
    assert result.ok, result.failure_message
    assert result.throughput > 0 and result.peak_memory_bytes > 0
    assert 0.02 < result.accuracy < 1.0  # next-token accuracy over a 512-token vocabulary: above chance
