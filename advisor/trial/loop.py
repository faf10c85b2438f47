"""The measured work of one trial in one process: build the model, apply the knobs, then
the training loop (timed steps inside it, peak memory, evaluation) or the inference loop.

A ``probe`` (``TrialSettings.part``) stops once the timing has settled: warm-up, timed
steps and peak memory, no full training and no evaluation (two-stage evaluation's first
part; paired confirmation runs probes too); its first training steps leave a fingerprint
(``advisor.trial.training``). A ``training`` run is the second part: the training budget
with a learning curve and an early-stop gate, then the evaluation, nothing timed. A full
trial does both in one process. Every timed trial times the noise sentinel (``advisor.machine.sentinel``) just before
and just after its measured region, and its timer drops the blocks of steps that other work disturbed
(``advisor.machine.timing``; the study's limit comes with the payload).

An inference trial times single calls after its throughput (``advisor.trial.latency``):
its p50 / p95 / p99 latency and its latency at batch 1, kept in its telemetry.

With data parallelism every rank runs this in lockstep (the ranks agree on when timing
stops); ``advisor.trial.ranks`` collects their results. Without it, the trial runs it directly.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

from advisor.core.errors import UnsupportedError
from advisor.core.latency import KEY as LATENCY
from advisor.core.results import TrialPayload, TrialResult
from advisor.core.two_stage import FINGERPRINT_STEPS
from advisor.machine.memory import peak_memory_for
from advisor.machine.sentinel import describe_kernel
from advisor.machine.timing import StepTimer
from advisor.techniques.prepare import apply
from advisor.trial.latency import measure_latency
from advisor.trial.shared import (
    agree_more,
    check_batch_fits,
    check_finite,
    cycle,
    evaluate,
    model_facts,
    model_hints,
    sentinel,
    share_disturbed,
    snapshot,
    training_batches,
)
from advisor.trial.training import fingerprint, training_run
from advisor.workload.contract import Workload, build_model


def run_configuration(payload: TrialPayload, workload: Workload, phases: dict[str, float],
                      datasets: tuple[Any, Any]) -> TrialResult:
    """Build the configured model and measure it on ``datasets`` (model.py's train and
    validation sets, loaded); ``phases`` collects where time went."""
    import torch

    config, settings = payload.config, payload.settings
    train, val = datasets
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local) if settings.device == "cuda" else torch.device("cpu")

    t = time.perf_counter()
    memory = peak_memory_for(device)
    memory.reset()
    phases["memory_baseline"] = time.perf_counter() - t
    t = time.perf_counter()
    torch.manual_seed(settings.seed)
    model = build_model(workload, trained=settings.workload == "train")
    prepared = apply(model, config, device, workload=settings.workload, **model_hints(workload, model, config, train))
    del model  # a pipeline stage keeps only its own layers
    if workload.start_trial is not None:  # a Lightning module's trainer, for configure_optimizers
        workload.start_trial(batch_size=config.batch_size, accumulation=prepared.step.accumulation,
                             rank=prepared.ranks.rank, world=prepared.ranks.world, precision=config.precision,
                             train_samples=settings.train_samples)
    phases["build"] = time.perf_counter() - t
    build_peak = memory.peak_bytes()  # the build's own peak (the fp32 model before bf16, int8, sharding)
    memory.restart_peak()  # the figure is the steady state's
    if settings.part == "training":
        return _training_part(prepared, workload, train, val, payload, phases, memory, build_peak)
    sampler = None
    if device.type == "cuda":
        from advisor.machine.nvml import nvml_sampler_for

        sampler = nvml_sampler_for(device).start()
    tolerance = payload.timing_tolerance if payload.timing_tolerance is not None else settings.timing_tolerance
    timer = StepTimer(settings.min_steps, tolerance, settings.max_timing_s, prepared.synchronize,
                      limit=payload.interference_limit, self_contended=_self_contended(config, settings.device))
    before = sentinel(prepared)
    if settings.workload == "inference":
        figures = _inference(prepared, workload, val, settings, timer, phases, memory.peak_bytes)
    elif settings.part == "probe":
        figures = _probe(prepared, workload, train, settings, timer, phases, memory.peak_bytes)
    else:
        figures = _train(prepared, workload, train, val, settings, timer, phases, memory.peak_bytes)
    after = sentinel(prepared)
    share_disturbed(prepared, timer)  # rank 0's figure drops what any rank's neighbour disturbed
    timing = timer.result()
    telemetry = sampler.stop() if sampler else {}
    if device.type == "cuda":  # the devices Ray gave this trial's task
        telemetry["cuda_visible_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    util = sampler.util_over(timer.windows) if sampler else None
    if util is not None:  # the GPU's busy share over the timed steps alone (a host-bound step shows here)
        telemetry["gpu_util_timed"] = util
    energy = sampler.energy_over(timer.windows) if sampler else None
    if energy is not None:  # the GPU's mean power over the timed steps, from its energy counter
        telemetry["energy"] = energy
        figures["energy_per_sample_j"] = energy["power_w"] * timing.median_s / config.batch_size
    if before is not None and after is not None:  # rank 0, or the only process
        telemetry["sentinel"] = {"before_s": before["s"], "after_s": after["s"], "kernel": describe_kernel(device)}
        if device.type == "cuda":
            telemetry["sentinel"]["slowdown_reasons"] = [before.get("slowdown_reasons"), after.get("slowdown_reasons")]
    if hasattr(memory, "reserved_bytes"):
        telemetry["reserved_peak_bytes"] = memory.reserved_bytes()
    telemetry["peak_memory_exact"] = getattr(memory, "exact", True)
    telemetry["build_peak_bytes"] = build_peak
    telemetry["timing"] = timing.to_dict()  # the measurement's spread, for a reader to judge
    if (interference := timer.interference()) is not None:  # the blocks dropped as disturbed, and why
        telemetry["interference"] = interference
    telemetry["intra_op_threads"] = torch.get_num_threads()
    telemetry["model"] = model_facts(prepared)
    latency = figures.pop("latency", None)
    if latency is not None:  # an inference trial's per-request latency (advisor.core.latency)
        telemetry[LATENCY] = latency.to_dict()
    first_step_s = figures.pop("first_step_s")
    found = figures.pop("fingerprint", None)
    if found is not None:
        telemetry["fingerprint"] = found
    return TrialResult(
        ok=True,
        throughput=config.batch_size / timing.median_s,  # global samples/s (all ranks)
        step_time_median_s=timing.median_s,
        step_time_iqr_s=timing.iqr_s,
        timed_steps=timing.steps,
        timing_converged=timing.converged,
        first_step_s=first_step_s,
        compile_s=max(0.0, first_step_s - timing.median_s) if prepared.compiled else 0.0,
        phase_s=phases,
        telemetry=telemetry,
        **figures,
    )


def _training_part(prepared: Any, workload: Any, train: Any, val: Any, payload: TrialPayload,
                   phases: dict[str, float], memory: Any, build_peak: int) -> TrialResult:
    """Two-stage evaluation's second part: the training budget, a learning curve and the
    gate (``advisor.trial.training``); nothing timed, so no throughput. The sentinel still
    runs: its readings keep the study's judgement of the machine informed."""
    before = sentinel(prepared)
    figures = training_run(prepared, workload, train, val, payload.settings, payload.gate, phases)
    after = sentinel(prepared)
    telemetry = {"curve": figures.pop("curve"), "early_stop": figures.pop("early_stop"),
                 "initial_loss": figures.pop("initial_loss"), "peak_memory_exact": getattr(memory, "exact", True),
                 "build_peak_bytes": build_peak,
                 "model": model_facts(prepared)}  # after finishing (pruning made permanent, QAT converted)
    if before is not None and after is not None:
        telemetry["sentinel"] = {"before_s": before["s"], "after_s": after["s"], "kernel": describe_kernel(prepared.device)}
    return TrialResult(ok=True, peak_memory_bytes=memory.peak_bytes(), phase_s=phases, telemetry=telemetry, **figures)


def _train(prepared: Any, workload: Any, train: Any, val: Any, settings: Any, timer: Any,
           phases: dict[str, float], memory_peak: Any) -> dict[str, Any]:
    bs = prepared.config.batch_size
    check_batch_fits(bs, train)
    optimizer = workload.optimizer(prepared.module.parameters())
    batches = training_batches(prepared, workload, train, settings.seed)

    def step(timed: bool) -> Any:
        with timer.step() if timed else contextlib.nullcontext():  # data loading is timed too
            x, y = next(batches)
            return prepared.train_step(x, y, workload.loss, optimizer)

    # 1. Train for the study's fixed number of samples; warm-up steps are untimed.
    t = t_warm = time.perf_counter()
    steps = max(1, round(settings.train_samples / bs))
    first_step_s, loss, warm = 0.0, None, False
    for i in range(steps):
        t_step = time.perf_counter()
        # Warm-up: at least warmup_steps and warmup_s of steps before timing starts. Every
        # rank runs the same steps; only whether a step is timed can differ between ranks.
        warm = warm or (i >= settings.warmup_steps and t_step - t_warm >= settings.warmup_s + first_step_s)
        loss = step(timed=warm and not timer.done())
        if i == 0:
            prepared.synchronize()
            first_step_s = time.perf_counter() - t_step
        if i % 10 == 0 or i == steps - 1:
            check_finite(loss, i)
    phases["train"] = time.perf_counter() - t

    # 2. More timed steps if the timing has not settled yet, and 3. the metric on the whole
    #    validation set (every rank evaluates it; rank 0 reports). Extra steps must not
    #    change the evaluated model: without finishing steps, evaluate first; with them
    #    (pruning, QAT: the model is converted after training) time first on a copy of
    #    the weights kept on the CPU, then restore, finish and evaluate.
    if prepared.step.finishers:
        peak = memory_peak()  # the extra steps repeat the same step: same peak
        more = agree_more(prepared, not timer.done())  # every rank decides alike
        saved = snapshot(prepared.module) if more else None
        _extra_timing(prepared, timer, step, phases, more)
        if saved is not None:
            prepared.module.load_state_dict(saved)
        t = time.perf_counter()
        prepared.finish()
        score = evaluate(prepared, workload, val, settings.eval_batch_size)
        phases["eval"] = time.perf_counter() - t
    else:
        t = time.perf_counter()
        score = evaluate(prepared, workload, val, settings.eval_batch_size)
        phases["eval"] = time.perf_counter() - t
        _extra_timing(prepared, timer, step, phases)
        peak = memory_peak()
    return {"score": score, "train_samples": steps * bs, "first_step_s": first_step_s,
            "final_loss": float(loss) if loss is not None else None, "peak_memory_bytes": peak}


def _probe(prepared: Any, workload: Any, train: Any, settings: Any, timer: Any,
           phases: dict[str, float], memory_peak: Any) -> dict[str, Any]:
    """Training steps until the timing settles (warm-up untimed), then stop: the speed and
    the steady-state peak memory of a full trial without its training budget or evaluation."""
    bs = prepared.config.batch_size
    check_batch_fits(bs, train)
    optimizer = workload.optimizer(prepared.module.parameters())
    batches = training_batches(prepared, workload, train, settings.seed)
    t = t_warm = time.perf_counter()
    first_step_s, loss, i, more = 0.0, None, 0, True
    losses: list[float] = []  # the first FINGERPRINT_STEPS, untimed
    found = None
    while more:
        t_step = time.perf_counter()
        warm = i >= max(settings.warmup_steps, FINGERPRINT_STEPS) and t_step - t_warm >= settings.warmup_s + first_step_s
        with timer.step() if warm else contextlib.nullcontext():
            x, y = next(batches)
            loss = prepared.train_step(x, y, workload.loss, optimizer)
        if i == 0:
            prepared.synchronize()
            first_step_s = time.perf_counter() - t_step
        if i < FINGERPRINT_STEPS:
            losses.append(float(loss))
            if i == FINGERPRINT_STEPS - 1:
                found = fingerprint(prepared, losses)
        if i % 10 == 0:
            check_finite(loss, i)
        i += 1
        more = agree_more(prepared, not (warm and timer.done()))
    check_finite(loss, i - 1)
    phases["timing"] = time.perf_counter() - t
    return {"score": None, "train_samples": i * bs, "first_step_s": first_step_s,
            "final_loss": float(loss) if loss is not None else None, "peak_memory_bytes": memory_peak(),
            "fingerprint": found}


def _extra_timing(prepared: Any, timer: Any, step: Any, phases: dict[str, float], more: bool | None = None) -> None:
    """Timed steps until every rank's timer is done (``more``: already agreed for the first)."""
    t = time.perf_counter()
    timer.discard_open()  # the training budget's last steps: untimed work (evaluation, a snapshot) came since
    prepared.model.train()
    if more is None:
        more = agree_more(prepared, not timer.done())
    while more:
        step(timed=True)
        more = agree_more(prepared, not timer.done())
    phases["extra_timing"] = time.perf_counter() - t


def _inference(prepared: Any, workload: Any, val: Any, settings: Any, timer: Any,
               phases: dict[str, float], memory_peak: Any) -> dict[str, Any]:
    import torch

    bs = prepared.config.batch_size
    if bs > len(val):
        raise UnsupportedError(f"batch size {bs} is larger than the validation set ({len(val)} samples)")
    batches = cycle(prepared.loader(val, drop_last=True, collate_fn=workload.collate))
    t = t_warm = time.perf_counter()
    first_step_s, i = 0.0, 0
    with torch.inference_mode():
        # Forward passes on validation batches: warm-up, then timed until the spread settles.
        while not timer.done():
            t_step = time.perf_counter()
            warm = i >= settings.warmup_steps and t_step - t_warm >= settings.warmup_s + first_step_s
            with timer.step() if warm else contextlib.nullcontext():
                x, _ = next(batches)
                prepared.predict(x)
                prepared.synchronize()
            if i == 0:
                first_step_s = time.perf_counter() - t_step
            i += 1
        phases["timing"] = time.perf_counter() - t
        latency = None
        if settings.part != "probe":  # per-request latency (advisor.trial.latency); a re-measurement needs none
            t = time.perf_counter()
            latency = measure_latency(prepared, batches, val, workload.collate, timer.limit, timer.contended())
            phases["latency"] = time.perf_counter() - t
    score = None
    if settings.part != "probe":
        t = time.perf_counter()
        score = evaluate(prepared, workload, val, settings.eval_batch_size)
        phases["eval"] = time.perf_counter() - t
    return {"score": score, "train_samples": 0, "first_step_s": first_step_s, "final_loss": None,
            "peak_memory_bytes": memory_peak(), "latency": latency}


def _self_contended(config: Any, device: str) -> bool:
    """Whether a CPU trial's compute threads and loader workers outnumber the CPUs it has:
    its timed blocks then wait for a CPU whatever the neighbours do."""
    import torch

    if device != "cpu":
        return False
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return torch.get_num_threads() + int(config.num_workers or 0) > cpus
