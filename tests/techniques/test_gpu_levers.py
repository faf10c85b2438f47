"""The levers H100 users reach for first (issue 15): DDP static graph / bucket views /
SyncBatchNorm, FSDP2 mixed precision and resharding, the attention kernel, cuDNN
autotuning, the allocator's expandable segments, fp8 scaling. What runs on a CPU runs here
for real (gloo ranks, CPU attention kernels); what needs a GPU is checked through the
capability rules on declared hardware and by tests that skip without CUDA."""

from __future__ import annotations

import pytest
import torch

from advisor import apply
from advisor.core.config import TrialConfig
from advisor.core.results import TrialPayload, TrialSettings
from advisor.techniques.registry import TECHNIQUES
from advisor.techniques.rules import conflicts
from advisor.workload.contract import load_workload
from advisor.workload.preflight import preflight

from conftest import EXAMPLES, WORKLOADS, run_as_trial
from technique_case import DECLARED

SETTINGS = TrialSettings(train_samples=640, max_timing_s=0.4)
# 20 steps of 64: enough for every strategy to leave chance (0.1) behind on the digits CNN,
# which 10 steps are not (fp32 on one process: 0.10 after 640 samples, 0.51 after 1280 on
# this AMD EPYC; FSDP with the bf16 policy 0.19 and 0.31)
TRAINS = TrialSettings(train_samples=1280, max_timing_s=0.4)


def trial(path, settings=SETTINGS, **knobs):
    result = run_as_trial(TrialPayload.of(load_workload(path), TrialConfig(batch_size=64, **knobs), settings))
    assert result.ok, result.failure_message
    return result


@pytest.mark.parametrize("knobs", [
    {"parallelism": "ddp", "devices": 2, "ddp_static_graph": True, "ddp_bucket_view": True,
     "activation_checkpointing": True},
    {"parallelism": "fsdp", "devices": 2, "fsdp_reshard": False},
    {"parallelism": "fsdp", "devices": 2, "fsdp_mixed_precision": "bf16"},  # BatchNorm kept fp32 in its own groups
], ids=["ddp-static-bucket-view", "fsdp-no-reshard", "fsdp-bf16-policy"])
def test_strategy_levers_train_over_gloo_ranks(knobs):
    result = trial(EXAMPLES / "digits_cnn.py", TRAINS, **knobs)
    assert result.score > 0.25 and result.throughput > 0


def test_strategy_levers_belong_to_their_strategy():
    assert "applies to DDP" in conflicts(TrialConfig(ddp_static_graph=True))
    assert "applies to DDP" in conflicts(TrialConfig(parallelism="fsdp", devices=2, sync_batchnorm=True))
    assert "applies to FSDP" in conflicts(TrialConfig(parallelism="ddp", devices=2, fsdp_reshard=False))
    assert "applies to FSDP" in conflicts(TrialConfig(fsdp_mixed_precision="bf16"))
    # a combination torch 2.13 cannot run is a rule, not a burnt trial (its reducer asserts)
    assert "static_graph with gradient accumulation" in conflicts(
        TrialConfig(parallelism="ddp", devices=2, ddp_static_graph=True, grad_accumulation=2, batch_size=64))
    assert "fp8_scaling=rowwise applies to fp8" in conflicts(TrialConfig(fp8_scaling="rowwise"))
    assert conflicts(TrialConfig(parallelism="ddp", devices=2, ddp_static_graph=True, ddp_bucket_view=True)) is None


def test_what_the_preflight_sees_for_the_levers():
    encoder = preflight(load_workload(WORKLOADS / "encoder.py"))  # nn.TransformerEncoder: SDPA inside
    cnn = preflight(load_workload(EXAMPLES / "digits_cnn.py"))
    assert encoder["calls_sdpa"] is True and cnn["calls_sdpa"] is False
    assert cnn["has_batchnorm"] is True and encoder["has_batchnorm"] is False
    sdpa, sync_bn, cudnn = TECHNIQUES["sdpa_backend"], TECHNIQUES["sync_batchnorm"], TECHNIQUES["cudnn_benchmark"]
    assert "does not call scaled_dot_product_attention" in sdpa.pointless("flash", cnn)
    assert sdpa.pointless("flash", encoder) is None and sdpa.pointless("default", cnn) is None
    assert "no BatchNorm" in sync_bn.pointless(True, encoder) and sync_bn.pointless(True, cnn) is None
    assert "no 2-D convolution" in cudnn.pointless(True, encoder) and cudnn.pointless(True, cnn) is None


@pytest.mark.parametrize("backend", ["math", "flash"])
def test_attention_kernels_run_on_cpu(backend):
    result = trial(WORKLOADS / "encoder.py", sdpa_backend=backend)
    assert result.throughput > 0


def test_the_pinned_kernel_is_the_one_used():
    """Under sdpa_kernel(EFFICIENT_ATTENTION), which has no CPU kernel, the forward fails:
    the pin is in force around the step (it is not a silent no-op)."""
    from torch.nn.attention import SDPBackend

    model = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), 1)
    prepared = apply(model, {"sdpa_backend": "efficient"}, "cpu")
    assert prepared.sdpa_backends == [SDPBackend.EFFICIENT_ATTENTION]
    with pytest.raises(RuntimeError, match="No viable backend for scaled_dot_product_attention"):
        prepared.train_step(torch.randn(4, 5, 16), torch.randn(4, 5, 16), torch.nn.functional.mse_loss,
                            torch.optim.SGD(model.parameters(), lr=0.1))


def test_what_each_gpu_lever_needs():
    t = TECHNIQUES
    cpu, t4, a100, h100 = DECLARED["8-core CPU"], DECLARED["T4"], DECLARED["A100"], DECLARED["8x H100"]
    for key in ("cudnn_benchmark", "expandable_segments", "sync_batchnorm"):
        assert t[key].unavailable(True, cpu) and t[key].unavailable(True, h100) is None
        assert t[key].unavailable(False, cpu) is None
    sdpa = t["sdpa_backend"]
    assert sdpa.unavailable("flash", cpu) is None and "CUDA kernel" in sdpa.unavailable("efficient", cpu)
    assert "8.0" in sdpa.unavailable("flash", t4) and sdpa.unavailable("efficient", t4) is None
    assert "9.0" in sdpa.unavailable("cudnn", a100) and sdpa.unavailable("cudnn", h100) is None
    mp = t["fsdp_mixed_precision"]
    assert mp.unavailable("bf16", DECLARED["1-core CPU"]) and mp.unavailable("bf16", cpu) is None  # avx512_bf16
    assert "8.0" in mp.unavailable("bf16", t4) and mp.unavailable("bf16", a100) is None
    scaling = t["fp8_scaling"]
    assert "8.9" in scaling.unavailable("rowwise", a100) and scaling.unavailable("rowwise", h100) is None


def test_cuda_settings_leave_a_cpu_run_alone():
    before = torch.backends.cudnn.benchmark
    prepared = apply(torch.nn.Conv2d(1, 2, 3), {"cudnn_benchmark": not before, "expandable_segments": True}, "cpu")
    assert torch.backends.cudnn.benchmark == before and prepared.device.type == "cpu"


def test_fp8_scaling_picks_torchaos_recipe_and_granularity():
    pytest.importorskip("torchao")
    from torchao.quantization import PerRow, PerTensor

    from advisor.techniques.prepared import Prepared
    from advisor.techniques.quantization import float8_config, fp8_inference_config

    def training(**knobs):
        cfg = TrialConfig(quantization="fp8_training", **knobs)
        return float8_config(Prepared(model=None, module=None, device=torch.device("cpu"), config=cfg))

    rowwise = training(fp8_scaling="rowwise", parallelism="fsdp", devices=2)
    assert rowwise.pad_inner_dim and not rowwise.enable_fsdp_float8_all_gather  # torchao: tensorwise only
    assert "AXISWISE" in str(rowwise.cast_config_input.scaling_granularity)
    assert training(parallelism="fsdp", devices=2).enable_fsdp_float8_all_gather
    assert isinstance(fp8_inference_config(TrialConfig(quantization="fp8", fp8_scaling="rowwise")).granularity,
                      (PerRow, list, tuple))
    assert isinstance(fp8_inference_config(TrialConfig(quantization="fp8")).granularity, (PerTensor, list, tuple))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_levers_on_a_gpu():
    """Runs on a REAL CUDA GPU: cuDNN autotuning on, the allocator's expandable segments,
    and a trial of the digits CNN with both."""
    before = torch.backends.cudnn.benchmark
    try:
        apply(torch.nn.Conv2d(1, 2, 3), {"cudnn_benchmark": True, "expandable_segments": True}, "cuda")
        assert torch.backends.cudnn.benchmark is True
        result = trial(EXAMPLES / "digits_cnn.py", cudnn_benchmark=True, expandable_segments=True, channels_last=True)
        assert result.peak_memory_bytes > 0
    finally:
        torch.backends.cudnn.benchmark = before


@pytest.mark.cuda
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")
def test_sync_batchnorm_under_ddp_on_gpus():
    """Runs on REAL CUDA GPUs: the BatchNorm layers become SyncBatchNorm and the model trains."""
    result = trial(EXAMPLES / "digits_cnn.py", parallelism="ddp", devices=2, sync_batchnorm=True)
    assert result.score > 0.2


def test_attention_dropout_is_seen_and_rules_out_cpu_flash():
    """torch's CPU flash kernel has no dropout ('No available kernel'): a model training with
    attention dropout gets flash dropped on a CPU, with the reason; on a GPU it stays."""
    from advisor.workload.preflight import _SeenCalls

    q = torch.randn(2, 2, 8, 16)
    mha = torch.nn.MultiheadAttention(16, 2, dropout=0.2, batch_first=True).train()
    with _SeenCalls() as seen:
        torch.nn.functional.scaled_dot_product_attention(q, q, q, dropout_p=0.1)
        mha(q[0], q[0], q[0], need_weights=False)
    assert seen.sdpa and seen.dropout == pytest.approx(0.2)
    with pytest.raises(RuntimeError, match="No available kernel"):  # the fact the rule rests on
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            torch.nn.functional.scaled_dot_product_attention(q, q, q, dropout_p=0.1)
    sdpa = TECHNIQUES["sdpa_backend"]
    facts = {"calls_sdpa": True, "sdpa_dropout": 0.1, "workload": "train"}
    assert "no attention dropout" in sdpa.pointless("flash", facts | {"device": "cpu"})
    assert sdpa.pointless("flash", facts | {"device": "cuda"}) is None
    assert sdpa.pointless("flash", facts | {"device": "cpu", "workload": "inference"}) is None  # eval: no dropout
    assert sdpa.pointless("math", facts | {"device": "cpu"}) is None
    assert sdpa.pointless("flash", facts | {"device": "cpu", "sdpa_dropout": 0.0}) is None


def test_compile_with_checkpointing_and_a_pinned_kernel_is_a_rule():
    """Found by benchmarks/combinations.py on the encoder: the compiled checkpointed block's
    recomputation does not run under the pinned kernel (CheckpointError)."""
    reason = conflicts(TrialConfig(compile=True, activation_checkpointing=True, sdpa_backend="math"))
    assert "pin the kernel or checkpoint, not both" in reason
    assert conflicts(TrialConfig(activation_checkpointing=True, sdpa_backend="math")) is None  # eager: fixed
    assert conflicts(TrialConfig(compile=True, activation_checkpointing=True)) is None
