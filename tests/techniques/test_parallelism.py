"""Data parallelism inside one trial: real ranks (gloo on this CPU), real digits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from advisor.core.config import TrialConfig
from advisor.core.errors import UnsupportedError
from advisor.core.results import TrialPayload, TrialSettings
from advisor.techniques.prepare import apply
from advisor.trial.entry import run_trial
from advisor.workload.contract import load_workload

from conftest import EXAMPLES, WORKLOADS, run_as_trial
from technique_case import DECLARED, TechniqueCase, digits_model


def _payload(path, config, **settings):
    return TrialPayload.of(load_workload(path), TrialConfig(**config),
                           TrialSettings(train_samples=1024, max_timing_s=1.0, **settings))


class TestParallelism(TechniqueCase):
    key = "parallelism"
    apply_values = ("single",)
    workload_refusals = frozenset({(v, "inference") for v in ("ddp", "fsdp", "tp", "pp", "fsdp_tp")})

    def test_offered_only_with_two_devices(self):
        assert "at least 2" in self.technique.unavailable("ddp", DECLARED["1-core CPU"])
        assert self.technique.unavailable("fsdp", DECLARED["8-core CPU"]) is None
        assert "at least 2" in self.technique.unavailable("ddp", DECLARED["A100"])
        assert self.technique.unavailable("ddp", DECLARED["8x H100"]) is None


class TestDevices(TechniqueCase):
    key = "devices"
    apply_values = (1,)
    workload_refusals = frozenset({(2, "inference"), (4, "inference"), (8, "inference")})
    snippet_via = ("parallelism", "--nproc-per-node=K")
    invalid_values = (0, -1, 1.5, "two", True)

    def test_no_more_ranks_than_devices(self):
        assert "2 CPU cores" in self.technique.unavailable(4, DECLARED["8-core CPU"].__class__(
            cpu=DECLARED["8-core CPU"].cpu.__class__("DECLARED CPU", 2)))
        assert self.technique.candidate_values(DECLARED["8x H100"]) == [1, 2, 4, 8]


class TestCommHook(TechniqueCase):
    key = "comm_hook"
    applied_elsewhere = "test_two_gloo_ranks_train_and_results_are_aggregated[ddp-fp16-hook-accumulation] (needs DDP)"
    workload_refusals = frozenset({("fp16", "inference"), ("bf16", "inference")})

    def test_bf16_hook_needs_nccl(self):
        assert "NCCL" in self.technique.unavailable("bf16", DECLARED["8-core CPU"])
        assert self.technique.unavailable("bf16", DECLARED["8x H100"]) is None


class TestBucketMb(TechniqueCase):
    key = "bucket_mb"
    applied_elsewhere = "test_two_gloo_ranks_train_and_results_are_aggregated[ddp-fp16-hook-accumulation] (needs DDP)"
    invalid_values = (0, -5, 2.5, "big", True)
    snippet_via = ("parallelism", "BUCKET_MB")


def test_apply_outside_a_launcher_says_how_to_launch():
    with pytest.raises(UnsupportedError, match="torchrun --nproc-per-node=2"):
        apply(digits_model(), {"parallelism": "ddp", "devices": 2}, "cpu")


@pytest.mark.parametrize("config, text", [
    ({"parallelism": "fsdp", "devices": 2, "pruning": "l1_unstructured"}, "FSDP shards them"),
    ({"parallelism": "fsdp", "devices": 2, "quantization": "qat_int8"}, "FSDP has sharded"),
    ({"comm_hook": "fp16"}, "applies to DDP"),
    ({"parallelism": "fsdp", "devices": 2, "bucket_mb": 5}, "applies to DDP"),
    ({"parallelism": "fsdp", "devices": 2, "channels_last": True}, "contiguous parameters"),
])
def test_combinations_that_cannot_work_are_refused_before_any_rank_starts(config, text):
    with pytest.raises(UnsupportedError, match=text):
        apply(digits_model(), config, "cpu")


def test_single_with_several_devices_is_refused():
    with pytest.raises(UnsupportedError, match="needs a parallelism over several ranks"):
        apply(digits_model(), {"devices": 2}, "cpu")


@pytest.mark.parametrize("config", [
    {"parallelism": "ddp", "devices": 2},
    {"parallelism": "fsdp", "devices": 2},
    {"parallelism": "ddp", "devices": 2, "comm_hook": "fp16", "bucket_mb": 1, "grad_accumulation": 2},
    {"parallelism": "ddp", "devices": 2, "pruning": "l1_unstructured", "quantization": "qat_int8"},
], ids=["ddp", "fsdp", "ddp-fp16-hook-accumulation", "ddp-pruning-qat"])
def test_two_gloo_ranks_train_and_results_are_aggregated(config):
    """digits_mlp has no BatchNorm: its accuracy does not depend on per-rank batch statistics."""
    result = run_as_trial(_payload(EXAMPLES / "digits_mlp.py", {"batch_size": 64, **config}))
    assert result.ok, result.failure_message
    ranks = result.telemetry["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1] and len({r["pid"] for r in ranks}) == 2
    if config["parallelism"] == "ddp":  # the DDP levers took effect in the ranks
        model = result.telemetry["model"]
        assert model["ddp_bucket_cap_mb"] == config.get("bucket_mb", 25)
        assert model.get("ddp_comm_hook") == ("fp16_compress_hook" if config.get("comm_hook") == "fp16" else None)
    assert os.getpid() not in {r["pid"] for r in ranks}  # ranks are processes of their own
    peaks = [r["peak_memory_bytes"] for r in ranks]
    assert all(p > 0 for p in peaks)
    assert result.peak_memory_bytes == max(peaks)
    assert result.telemetry["peak_memory_sum_bytes"] == sum(peaks)
    # the ranks step in lockstep: their step times agree
    times = [r["step_time_median_s"] for r in ranks]
    assert max(times) < 2 * min(times)
    assert 0.5 < result.score <= 1.0  # trained, not chance (0.1)
    assert ranks[0]["accuracy"] == ranks[1]["accuracy"]  # identical replicas evaluate alike
    assert result.train_samples == 1024
    assert result.phase_s["launch"] > 0


@pytest.mark.parametrize("extra", [{}, {"activation_checkpointing": True}], ids=["fsdp", "fsdp-checkpointing"])
def test_fsdp_shards_a_model_with_tied_weights_and_blocks_in_a_module_list(extra):
    """A language model's output layer tied to its embedding, its layers in a ModuleList:
    sharding each top-level child failed (a tied parameter in two FSDP groups; a container
    has no forward). Each layer is sharded, the tied weight stays with the root."""
    result = run_as_trial(_payload(WORKLOADS / "tied_lm.py", {"batch_size": 32, "parallelism": "fsdp",
                                                           "devices": 2, **extra}))
    assert result.ok, result.failure_message
    assert result.score > 0.15  # learning the rule (chance: 1/32)


@pytest.mark.parametrize("fault, failure_class, text", [
    ("raise", "error", "rank 1: ValueError: rank 1 cannot go on"),
    ("abort", "crash", "rank 1 was killed by SIGABRT"),
])
@pytest.mark.timeout(120)
def test_a_failing_rank_fails_the_whole_trial(monkeypatch, fault, failure_class, text):
    monkeypatch.setenv("ADVISOR_TEST_RANK_FAULT", fault)
    result = run_as_trial(_payload(WORKLOADS / "rank_faults.py", {"batch_size": 32, "parallelism": "ddp", "devices": 2}))
    assert not result.ok
    assert result.failure_class == failure_class
    assert text in result.failure_message


def _ranks_of(supervisor: int) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                if f"ADVISOR_SUPERVISOR_PID={supervisor}".encode() in fh.read().split(b"\0"):
                    found.append(int(pid))
        except OSError:
            pass
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
@pytest.mark.timeout(120)
def test_hung_ranks_die_with_a_killed_trial(tmp_path):
    """What a trial timeout does: Ray kills the trial's process; its ranks must not survive."""
    script = tmp_path / "trial.py"
    script.write_text(
        "import json, sys\n"
        "from advisor.core.results import TrialPayload\n"
        "from advisor.trial.entry import run_trial\n"
        "run_trial(TrialPayload.from_dict(json.loads(sys.argv[1])))\n")
    payload = _payload(WORKLOADS / "rank_faults.py", {"batch_size": 32, "parallelism": "ddp", "devices": 2})
    env = dict(os.environ, ADVISOR_TEST_RANK_FAULT="hang")
    import json

    trial = subprocess.Popen([sys.executable, str(script), json.dumps(payload.to_dict())], env=env)
    try:
        deadline = time.monotonic() + 60
        while len(_ranks_of(trial.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        ranks = _ranks_of(trial.pid)
        assert len(ranks) == 2, "both ranks started"
        time.sleep(3)  # let them reach the hang
        trial.send_signal(signal.SIGKILL)
        trial.wait()
        deadline = time.monotonic() + 10
        while _ranks_of(trial.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _ranks_of(trial.pid) == []
    finally:
        for pid in _ranks_of(trial.pid):
            os.kill(pid, signal.SIGKILL)
        trial.kill()


def test_a_gpu_trial_wider_than_the_cluster_is_answered_at_once():
    """No GPU here: the executor's plan is DECLARED (set by hand) and Ray is not involved."""
    from advisor.runner.ray_executor import RayExecutor

    executor = RayExecutor("cuda")
    executor._plan_resources([{"Alive": True, "Resources": {"GPU": 4.0, "CPU": 16.0}}])  # one node of 4 GPUs
    running = executor.submit(3, _payload(EXAMPLES / "digits_mlp.py", {"parallelism": "ddp", "devices": 8}))
    [(done, result)] = executor.wait([running], timeout=0)
    assert done is running and result.failure_class == "unsupported"
    assert "needs 8 GPUs; the Ray cluster has 4 over all its nodes" in result.failure_message


@pytest.mark.cuda
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")
@pytest.mark.parametrize("parallelism", ["ddp", "fsdp"])
def test_two_gpu_ranks_over_nccl(parallelism):
    result = run_trial(_payload(EXAMPLES / "digits_cnn.py", {"batch_size": 64, "parallelism": parallelism, "devices": 2},
                                device="cuda"))
    assert result.ok, result.failure_message
    assert len(result.telemetry["ranks"]) == 2
