"""The memory plan: each rank's peak estimated on fake tensors before a trial allocates
anything. It is the peak the same steps reach on real tensors (tracked alike), a lower
bound of what the trial then measures on this CPU (its resident memory: allocator slack and
the libraries' buffers come on top), each strategy estimated as its ranks run it; a
configuration over --memory-cap is not run and not counted; an estimate that cannot be made
is a reason, never a failed trial."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import optuna
import pytest

from advisor.core.config import TrialConfig
from advisor.core.objectives import DIRECTIONS, Limits
from advisor.core.results import TrialPayload, TrialSettings
from advisor.core.stored import read_trial
from advisor.search.known_oom import KnownOom
from advisor.study.run._ledger import record_result
from advisor.trial.estimate import estimate_here
from advisor.workload.contract import load_workload

from conftest import EXAMPLES, run_as_trial, write_model

PROBE = TrialSettings(train_samples=512, max_timing_s=0.5, part="probe")
MiB = 2**20


def payload(example, cap=None, **knobs):
    path = example if not isinstance(example, str) else EXAMPLES / example
    return TrialPayload.of(load_workload(path), TrialConfig(**knobs), PROBE, estimate=True, memory_cap=cap)


@pytest.mark.parametrize("example, knobs", [
    ("digits_cnn.py", {"batch_size": 64}),
    ("char_lm.py", {"batch_size": 16, "activation_checkpointing": True}),
    ("digits_mlp.py", {"batch_size": 64, "parallelism": "ddp", "devices": 2}),  # a rank: one process + buckets
], ids=["cnn", "lm-checkpointed", "mlp-ddp"])
def test_the_estimate_is_the_peak_the_same_steps_reach_on_real_tensors(example, knobs):
    estimate = estimate_here(payload(example, **knobs))
    real = estimate_here(payload(example, **knobs), fake=False)
    assert estimate["peak_bytes"] == pytest.approx(real["peak_bytes"], rel=0.02)
    assert estimate["by_kind"]["parameters"] == real["by_kind"]["parameters"]
    assert estimate["by_kind"]["activations"] > 0


def test_fp16_is_estimated_as_bf16_whose_sizes_it_has():
    """fp16's loss scaler reads its overflow flag each step, which fake tensors cannot give:
    the estimate was unavailable for fp16, on a GPU its main precision."""
    fp16 = estimate_here(payload("char_lm.py", batch_size=16, precision="fp16"))
    bf16 = estimate_here(payload("char_lm.py", batch_size=16, precision="bf16"))
    assert fp16["peak_bytes"] == bf16["peak_bytes"] and "fp16 as bf16" in fp16["how"]


def test_each_strategy_is_estimated_as_its_ranks_run_it():
    single = estimate_here(payload("char_lm.py", batch_size=32))
    fsdp = estimate_here(payload("char_lm.py", batch_size=32, parallelism="fsdp", devices=2))
    tp = estimate_here(payload("char_lm.py", batch_size=32, parallelism="tp", devices=2))
    pp = estimate_here(payload("char_lm.py", batch_size=32, parallelism="pp", devices=2))
    ddp = estimate_here(payload("char_lm.py", batch_size=32, parallelism="ddp", devices=2))
    params = single["by_kind"]["parameters"]
    assert fsdp["by_kind"]["parameters"] == pytest.approx(params / 2, rel=0.01)  # each rank holds half a shard
    assert params / 2 < tp["by_kind"]["parameters"] < params  # the MLPs split, the fused attention whole
    assert sorted(pp["ranks"]) == ["0", "1"] and pp["ranks"]["0"] != pp["ranks"]["1"]  # every stage, each its own
    assert ddp["by_kind"]["ddp_buckets"] == params  # a bucket for every gradient
    for strategy in (fsdp, tp, pp, ddp):
        assert strategy["peak_bytes"] < single["peak_bytes"]  # half the batch, or of the model, per rank
        assert strategy["world"] == 2


@pytest.mark.parametrize("knobs", [{"batch_size": 64}, {"batch_size": 64, "parallelism": "pp", "devices": 2}],
                         ids=["single", "pp"])
def test_a_trial_records_its_estimate_below_what_it_measures(knobs):
    """On this CPU the measured peak is resident memory; benchmarks/results/memory_estimate.json
    has the estimate well under it on the examples (and equal to the tensors' peak). A
    pipeline's ranks also keep what tracing the model with torch.export left behind."""
    result = run_as_trial(payload("digits_mlp.py", **knobs))
    assert result.ok, result.failure_message
    estimate = result.memory_estimate
    assert estimate["method"].startswith("FakeTensorMode + MemTracker") and estimate["seconds"] > 0
    # how far below depends on the allocator's slack (digits_mlp's resident peak read 5-10 MiB
    # against 1.8 MiB of tensors); that the estimate is the tensors' peak is tested above
    assert 0 < estimate["peak_bytes"] <= result.peak_memory_bytes
    assert result.phase_s["estimate"] == estimate["seconds"]


def test_a_configuration_over_the_memory_cap_is_not_run_and_not_counted(tmp_path):
    result = run_as_trial(payload("digits_cnn.py", cap=MiB, batch_size=64))
    assert not result.ok and result.skipped and result.failure_class == "oom"
    assert "is over --memory-cap 1.0 MiB" in result.failure_message and "not run" in result.failure_message
    assert "build" not in result.phase_s and result.memory_estimate["peak_bytes"] > MiB
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}", directions=list(DIRECTIONS))
    trial = study.ask()
    trial.set_user_attr("config", TrialConfig(batch_size=64).to_dict())
    record = read_trial(record_result(study, trial, result, 1.0, Limits(0.01, MiB), None))
    assert record.state == "skipped" and not record.counted
    known = KnownOom()
    known.learn([record])
    reason = known.reason(TrialConfig(batch_size=128))
    assert reason.startswith("known to be over the memory limit: trial 0 was estimated over the memory limit")
    assert "run out of memory" not in reason  # nothing ran, nothing ran out: the user's cap ruled it out
    assert known.reason(TrialConfig(batch_size=32)) is None
    skipped = study.ask()
    skipped.set_user_attr("config", TrialConfig(batch_size=128).to_dict())
    from advisor.core.results import TrialResult
    from advisor.core.stored import read_study
    from advisor.outputs.summary import counts

    record_result(study, skipped, TrialResult(ok=False, skipped=True, failure_class="oom", failure_message=reason),
                  0.0, Limits(0.01, MiB), None)
    tally = counts(read_study(study))
    assert tally["skipped_over_limit"] == 1 and tally["skipped_oom"] == 0 and tally["skipped_estimate"] == 1


def test_an_estimate_that_cannot_be_made_is_a_reason_and_the_trial_runs(tmp_path):
    path = write_model(tmp_path, (EXAMPLES / "digits_mlp.py").read_text().replace(
        "def model() -> nn.Module:\n", "def model() -> nn.Module:\n    assert torch.ones(1).item() == 1.0  # data-dependent\n"))
    result = run_as_trial(payload(path, batch_size=64))
    assert result.ok, result.failure_message
    assert "DataDependentOutputException" in result.memory_estimate["unavailable"]


@pytest.mark.parametrize("forked", [False, True], ids=["fresh-interpreter", "forked"])
def test_an_estimating_process_that_dies_says_why(tmp_path, forked):
    """Its output is kept: a child killed by a signal (a C++ abort inside torch) is an
    ``unavailable`` reason with its last words, not a bare exit status. From a process of
    its own, as a trial's (a fork of this test process, whose OpenMP threads have run,
    would hang in its first parallel region: libgomp is not fork-safe)."""
    path = write_model(tmp_path, (EXAMPLES / "digits_mlp.py").read_text().replace(
        "def model() -> nn.Module:\n",
        "def model() -> nn.Module:\n    import os, sys\n    print('the workload gives up', file=sys.stderr)\n"
        "    os.abort()\n"))
    script = textwrap.dedent(f"""
        import json
        from advisor.core.config import TrialConfig
        from advisor.core.results import TrialPayload, TrialSettings
        from advisor.trial.estimate import estimate_memory
        from advisor.trial.process import mark_forked
        from advisor.workload.contract import load_workload

        mark_forked({forked})  # as a trial process forked from the fork server, or spawned
        settings = TrialSettings(train_samples=512, max_timing_s=0.5, part="probe")
        payload = TrialPayload.of(load_workload({str(path)!r}), TrialConfig(batch_size=64), settings, estimate=True)
        print(json.dumps(estimate_memory(payload)))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    reason = json.loads(done.stdout.strip().splitlines()[-1])["unavailable"]
    assert reason.startswith("the estimating process ended without an estimate (killed by SIGABRT): ")
    assert "Fatal Python error: Aborted" in reason and "model.py" in reason and "in model" in reason


def test_a_trial_process_with_cuda_initialised_estimates_in_a_fresh_interpreter(tmp_path):
    """Seen on an H100: every estimate was ``Cannot re-initialize CUDA in forked
    subprocess`` once something in the trial's process had initialised CUDA. Such a process
    estimates in a fresh interpreter instead of a fork. No GPU here: torch's check is
    patched (a FAKE, named as such) to say CUDA is initialised, and a fork would fail the
    run. From a process of its own, as a trial's."""
    script = textwrap.dedent(f"""
        import json
        import torch
        import advisor.trial.estimate as estimate
        from advisor.core.config import TrialConfig
        from advisor.core.results import TrialPayload, TrialSettings
        from advisor.trial.process import can_fork, mark_forked
        from advisor.workload.contract import load_workload

        mark_forked(True)
        assert can_fork()
        torch.cuda.is_initialized = lambda: True  # FAKE: no GPU here
        assert not can_fork()
        def no_fork(*args):
            raise AssertionError("forked a process with CUDA initialised")
        estimate._forked = no_fork
        settings = TrialSettings(train_samples=512, max_timing_s=0.5, part="probe")
        workload = load_workload({str(EXAMPLES / "digits_mlp.py")!r})
        payload = TrialPayload.of(workload, TrialConfig(batch_size=64), settings, estimate=True)
        print(json.dumps(estimate.estimate_memory(payload)))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found.get("peak_bytes", 0) > 0, found


def test_a_forked_child_gets_a_thread_pool_of_its_own_before_its_first_backward():
    """Issue 27: a forked child's first backward starts autograd's device threads (eight,
    under FakeTensorMode, with a CUDA build of torch even without a GPU), each of which asks
    for torch's pthreadpool as it starts; the pool inherited from the parent is rebuilt by the
    first to ask, not thread-safely, and another got none and aborted the child ("Invalid
    thread pool!", SIGABRT). ForkedChild rebuilds it first. (A CPU build starts no device
    threads: there this passes either way.)"""
    script = textwrap.dedent("""
        import torch
        from torch import nn
        from torch._subclasses.fake_tensor import FakeTensorMode
        from advisor.trial.process import ForkedChild

        torch.set_num_threads(2)  # as a trial process takes OMP_NUM_THREADS
        torch.ones(1 << 17) / 16.0  # a parallel op, as loading a dataset: the pool is made

        def run():
            with FakeTensorMode(allow_non_fake_inputs=True):
                nn.Linear(8, 8)(torch.randn(4, 8)).sum().backward()
            return 0

        print([ForkedChild(run).wait() for _ in range(5)])
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[0, 0, 0, 0, 0]", done.stderr[-2000:]


def test_a_model_on_fake_tensors_moves_to_another_device_whole():
    """apply() moves the model to the trial's device; built on fake tensors (the estimate),
    ``Module.to`` cannot (it swaps each parameter in place, which fake mode's weak reference
    forbids: every estimate on CUDA was unavailable, issue 27). The meta device stands in
    for CUDA here; parameters, buffers, ties and requires_grad all move."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from advisor.techniques.prepare import move

    with FakeTensorMode(allow_non_fake_inputs=True):
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 4))
        model[2].weight = model[0].weight
        model[1].weight.requires_grad_(False)
        with pytest.raises(RuntimeError, match="swap"):
            model.to("meta")  # what apply() did
        move(model, torch.device("meta"))
    assert {t.device.type for t in (*model.parameters(), *model.buffers())} == {"meta"}
    assert model[2].weight is model[0].weight and not model[1].weight.requires_grad
    assert isinstance(model[0].weight, torch.nn.Parameter)


@pytest.mark.cuda
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("example, knobs", [
    ("digits_cnn.py", {"batch_size": 64}),
    ("char_lm.py", {"batch_size": 16, "precision": "bf16"}),
], ids=["cnn", "lm-bf16"])
def test_on_cuda_the_estimate_is_the_peak_the_same_steps_reach(example, knobs):
    """The model moves to the GPU on fake tensors, and its estimate is the real tensors' peak."""
    import dataclasses

    cuda = dataclasses.replace(PROBE, device="cuda")

    def on_cuda(**kw):
        return TrialPayload.of(load_workload(EXAMPLES / example), TrialConfig(**kw), cuda, estimate=True)

    estimate = estimate_here(on_cuda(**knobs))
    real = estimate_here(on_cuda(**knobs), fake=False)
    assert estimate["peak_bytes"] == pytest.approx(real["peak_bytes"], rel=0.05)
    assert estimate["by_kind"]["parameters"] == real["by_kind"]["parameters"] > 0
