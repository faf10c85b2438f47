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

from conftest import EXAMPLES, run_as_trial, skip_without

skip_without("transformers")
GPT2 = EXAMPLES / "hf_gpt2.py"


def test_preflight_and_the_layers_the_knobs_see():
    wl = load_workload(GPT2)
    facts = preflight(wl)
    assert (facts["train_size"], facts["val_size"]) == (2048, 256)
    model = wl.model()
    assert blocks(model) == list(model.transformer.h)  # its two GPT2Blocks


def test_gpt2s_conv1d_projections_count_as_linear_layers(tmp_path):
    """Found by the first H100 run: GPT-2's projections are transformers Conv1D layers, so
    the space dropped pruning ("at most one Linear/Conv layer") and quantization reached
    only lm_head. The preflight counts them, and the space keeps both knobs."""
    from advisor.machine.hardware import detect
    from advisor.search.space import filter_space, load_space

    facts = preflight(load_workload(GPT2))
    assert (facts["linear_layers"], facts["conv1d_layers"], facts["prunable_layers"]) == (9, 8, 8)
    for workload in ("train", "inference"):
        space = filter_space(load_space("cpu"), detect(), {"workload": workload} | facts)
        assert not [d for d in space.dropped if d.knob in ("pruning", "quantization") and "Linear" in d.reason]


def test_a_quantized_gpt2_is_estimated_and_trained_with_its_conv1d_layers_swapped():
    """The swap runs on the memory estimate's fake tensors too (their parameters are
    FakeTensors: the estimate once missed the swapped layers' fake quantization), and a
    trial records how many layers it swapped."""
    from advisor.trial.estimate import estimate_here

    workload = load_workload(GPT2)
    config = TrialConfig(batch_size=16, quantization="qat_int8")

    def payload(part, estimate):
        return TrialPayload.of(workload, config, TrialSettings(train_samples=128, max_timing_s=0.3, part=part),
                               estimate=estimate)

    fake, real = estimate_here(payload("probe", True)), estimate_here(payload("probe", True), fake=False)
    assert fake["by_kind"] == real["by_kind"]
    result = run_trial(payload("full", False))
    assert result.ok, result.failure_message
    model = result.telemetry["model"]
    assert model["conv1d_as_linear"] == 8 and model["quantized_linear_layers"] == 9


@pytest.mark.parametrize("config", [
    {"batch_size": 16},
    {"batch_size": 16, "activation_checkpointing": True, "precision": "bf16"},
    {"batch_size": 16, "parallelism": "fsdp", "devices": 2},
], ids=["plain", "checkpointing-bf16", "fsdp"])
def test_a_transformers_model_trains_under_the_knobs(config):
    payload = TrialPayload.of(load_workload(GPT2), TrialConfig(**config),
                              TrialSettings(train_samples=512, max_timing_s=0.5))
    result = run_as_trial(payload)
    assert result.ok, result.failure_message
    assert result.throughput > 0 and result.peak_memory_bytes > 0
    assert 0.02 < result.score < 1.0  # next-token accuracy over a 512-token vocabulary: above chance


def test_a_pipeline_is_dropped_with_the_reason_a_transformers_model_cannot_be_one(tmp_path):
    """Found by benchmarks/combinations.py: `pp` on GPT-2 failed in every trial (torch.export:
    "Found <class 'transformers.cache_utils.DynamicCache'> in output"). The preflight says
    why before the search, and the space drops the option with that reason."""
    from advisor.machine.hardware import detect
    from advisor.search.space import filter_space, load_space

    facts = preflight(load_workload(EXAMPLES / "hf_gpt2.py"))
    assert facts["pipeline_units"] == 0 and 'computes its own loss (LOSS = "output.loss")' in facts["pipeline_refusal"]
    space = filter_space(load_space("cpu"), detect(), {"workload": "train"} | facts)
    assert any(d.knob == "parallelism" and d.value == "pp" and "its own loss" in d.reason for d in space.dropped)

    own_loss = tmp_path / "gpt2_loss.py"  # the same model with a loss() of its own: the cache is in the way
    own_loss.write_text((EXAMPLES / "hf_gpt2.py").read_text().replace(
        'LOSS = "output.loss"',
        "def loss(output, target):\n"
        "    return torch.nn.functional.cross_entropy(output.logits.flatten(0, 1), target.flatten(), ignore_index=-100)"))
    facts = preflight(load_workload(own_loss))
    assert "config.use_cache = False" in facts["pipeline_refusal"] and facts["pipeline_units"] == 0
