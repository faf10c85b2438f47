"""Tensor-parallel plans: derived from the model's layers, declared by a transformers model,
or given by the user; refused with a reason. Applied over real gloo ranks in
tests/techniques/test_model_parallel.py, where training matches one process."""

from __future__ import annotations

import pytest
import torch.nn.functional as F
from torch import nn

from advisor.core.errors import WorkloadError
from advisor.workload.tp_plan import MHA_REASON, plan_for, refusal

WORLD = 2


class Mlp(nn.Module):
    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(x)))  # the residual is outside the pair


class SwiGlu(nn.Module):
    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.gate_proj, self.up_proj = nn.Linear(d, 2 * d, bias=False), nn.Linear(d, 2 * d, bias=False)
        self.down_proj = nn.Linear(2 * d, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Attention(nn.Module):
    def __init__(self, d: int = 16, heads: int = 4) -> None:
        super().__init__()
        self.num_heads = heads
        self.q_proj, self.k_proj, self.v_proj = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.out_proj = nn.Linear(d, d)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = (p(x).view(b, t, self.num_heads, -1).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        return x + self.out_proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, -1))


class Softmaxed(Mlp):
    def forward(self, x):
        return self.fc2(self.fc1(x).softmax(-1))  # a softmax mixes the columns: no split


def block() -> nn.Module:
    return nn.Sequential(Attention(), nn.LayerNorm(16), Mlp())


def test_mlp_pairs_become_colwise_then_rowwise():
    assert plan_for(Mlp(), WORLD).styles == {"fc1": "colwise", "fc2": "rowwise"}
    assert plan_for(SwiGlu(), WORLD).styles == {"gate_proj": "colwise", "up_proj": "colwise", "down_proj": "rowwise"}
    seq = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 8), nn.Linear(8, 2))
    assert plan_for(seq, WORLD).styles == {"0": "colwise", "3": "rowwise"}


def test_a_non_elementwise_op_between_the_pair_is_refused_with_the_reason():
    why = refusal(Softmaxed(), WORLD)
    assert "fc1, fc2" in why and "only elementwise operations" in why


def test_attention_with_separate_projections_splits_its_heads():
    plan = plan_for(block(), WORLD)
    assert plan.styles == {"0.q_proj": "colwise", "0.k_proj": "colwise", "0.v_proj": "colwise",
                           "0.out_proj": "rowwise", "2.fc1": "colwise", "2.fc2": "rowwise"}
    assert plan.heads == {"0.num_heads": 2}
    odd = plan_for(Attention(d=12, heads=3), WORLD)
    assert not odd.styles and "num_heads=3 does not divide by 2 ranks" in odd.skipped[0]


@pytest.mark.parametrize("model, world, text", [
    (nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Conv2d(4, 4, 3), nn.Flatten()), 2, "no Linear layers in pairs"),
    (nn.TransformerEncoderLayer(16, 4, 32, batch_first=True), 2, MHA_REASON),
    (Mlp(), 3, "fc2: its 64 input features do not divide by 3 ranks"),
])
def test_models_with_no_plannable_block_are_refused(model, world, text):
    assert text in refusal(model, world)


def test_transformers_models_declared_plan_is_used_and_checked():
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    llama = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2))
    plan = plan_for(llama, WORLD)
    assert plan.source == "LlamaForCausalLM.tp_plan (transformers)"
    assert plan.styles["model.layers.1.self_attn.o_proj"] == "rowwise"  # `layers.*` expanded per layer
    assert plan.styles["model.layers.0.mlp.gate_proj"] == "colwise"
    assert plan.styles["model.embed_tokens"] == "embedding_rowwise"
    assert plan.styles["lm_head"] == "colwise_gather_output"
    assert "num_key_value_heads=2 does not divide by 4 ranks" in refusal(llama, 4)
    gpt2 = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=1, n_head=4, vocab_size=64, n_positions=16))
    assert "Conv1D" in refusal(gpt2, WORLD)


def test_a_users_plan_is_checked_name_by_name():
    user = {"0.q_proj": "colwise", "0.k_prj": "colwise", "0": "rowwise", "2.fc1": "sideways", "2.fc*": "colwise"}
    with pytest.raises(WorkloadError) as err:
        plan_for(block(), WORLD, user)
    text = str(err.value)
    assert "'0.k_prj' names no submodule; '0' has q_proj, k_proj, v_proj, out_proj (did you mean '0.k_proj'?)" in text
    assert "'0' is a Attention; only Linear and Embedding layers" in text
    assert "'2.fc1': unknown style 'sideways'" not in text  # the later `2.fc*` entry set it to colwise
    assert plan_for(block(), WORLD, {"2.fc1": "colwise", "2.fc2": "rowwise"}).styles == {
        "2.fc1": "colwise", "2.fc2": "rowwise"}
    with pytest.raises(WorkloadError, match="'2.fc1': unknown style 'sideways'"):
        plan_for(block(), WORLD, {"2.fc1": "sideways"})
