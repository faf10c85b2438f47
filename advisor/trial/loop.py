"""The measured work of one trial in one process: build the model, apply the knobs, then
the training loop (timed steps inside it, peak memory, evaluation) or the inference loop.

A ``probe`` (``TrialSettings.stage``) stops once the timing has settled: warm-up, timed
steps and peak memory, no full training and no evaluation (two-stage evaluation's first
part; paired confirmation runs probes too); its first training steps leave a fingerprint
(``advisor.trial.accuracy``). An ``accuracy`` run is the second part: the training budget
with a learning curve and an early-stop gate, then the evaluation, nothing timed. A full
trial does both in one process. Every timed trial times the noise sentinel (``advisor.machine.sentinel``) just before
and just after its measured region.

With data parallelism every rank runs this in lockstep (the ranks agree on when timing
stops); ``advisor.trial.ranks`` collects their results. Without it, the trial runs it directly.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from typing import Any

from advisor.core.errors import UnsupportedError
from advisor.core.results import TrialPayload, TrialResult
from advisor.core.two_stage import FINGERPRINT_STEPS
from advisor.machine.memory import peak_memory_for
from advisor.machine.sentinel import describe_kernel, read_sentinel
from advisor.machine.timing import StepTimer
from advisor.techniques.prepare import apply
from advisor.trial.accuracy import accuracy_run, fingerprint
from advisor.trial.errors import NonFiniteLoss
from advisor.workload.contract import Workload, build_model, check_metric, load_datasets


def run_configuration(payload: TrialPayload, workload: Workload, phases: dict[str, float]) -> TrialResult:
    """Build the configured model and measure it; ``phases`` collects where time went."""
    import torch

    config, settings = payload.config, payload.settings
    t = time.perf_counter()
    train, val = load_datasets(workload)
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local) if settings.device == "cuda" else torch.device("cpu")
    phases["load"] = phases.get("load", 0.0) + time.perf_counter() - t

    t = time.perf_counter()
    memory = peak_memory_for(device)
    memory.reset()
    phases["memory_baseline"] = time.perf_counter() - t
    t = time.perf_counter()
    torch.manual_seed(settings.seed)
    prepared = apply(build_model(workload), config, device, workload=settings.workload)
    if workload.start_trial is not None:  # a Lightning module's trainer, for configure_optimizers
        workload.start_trial(batch_size=config.batch_size, accumulation=prepared.accumulation, rank=prepared.rank,
                             world=prepared.world, precision=config.precision, train_samples=settings.train_samples)
    phases["build"] = time.perf_counter() - t
    build_peak = memory.peak_bytes()  # the build's own peak (the fp32 model before bf16, int8, sharding)
    memory.restart_peak()  # the figure is the steady state's
    if settings.stage == "accuracy":
        return _accuracy_part(prepared, workload, train, val, payload, phases, memory, build_peak)
    sampler = None
    if device.type == "cuda":
        from advisor.machine.nvml import nvml_sampler_for

        sampler = nvml_sampler_for(device).start()
    timer = StepTimer(settings.min_steps, settings.target_rel_iqr, settings.max_timing_s, prepared.synchronize)
    before = _sentinel(prepared)
    if settings.workload == "inference":
        figures = _inference(prepared, workload, val, settings, timer, phases, memory.peak_bytes)
    elif settings.stage == "probe":
        figures = _probe(prepared, workload, train, settings, timer, phases, memory.peak_bytes)
    else:
        figures = _train(prepared, workload, train, val, settings, timer, phases, memory.peak_bytes)
    after = _sentinel(prepared)
    timing = timer.result()
    telemetry = sampler.stop() if sampler else {}
    if before is not None and after is not None:  # rank 0, or the only process
        telemetry["sentinel"] = {"before_s": before["s"], "after_s": after["s"], "kernel": describe_kernel(device)}
        if device.type == "cuda":
            telemetry["sentinel"]["slowdown_reasons"] = [before.get("slowdown_reasons"), after.get("slowdown_reasons")]
    if hasattr(memory, "reserved_bytes"):
        telemetry["reserved_peak_bytes"] = memory.reserved_bytes()
    telemetry["peak_memory_exact"] = getattr(memory, "exact", True)
    telemetry["build_peak_bytes"] = build_peak
    telemetry["timing"] = timing.to_dict()  # the measurement's spread, for a reader to judge
    telemetry["intra_op_threads"] = torch.get_num_threads()
    telemetry["model"] = _model_facts(prepared)
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


def _accuracy_part(prepared: Any, workload: Any, train: Any, val: Any, payload: TrialPayload,
                   phases: dict[str, float], memory: Any, build_peak: int) -> TrialResult:
    """Two-stage evaluation's second part: the training budget, a learning curve and the
    gate (``advisor.trial.accuracy``); nothing timed, so no throughput. The sentinel still
    runs: its readings keep the study's judgement of the machine informed."""
    before = _sentinel(prepared)
    figures = accuracy_run(prepared, workload, train, val, payload.settings, payload.gate, phases,
                           _evaluate, _agree_more, _training_batches)
    after = _sentinel(prepared)
    telemetry = {"curve": figures.pop("curve"), "early_stop": figures.pop("early_stop"),
                 "initial_loss": figures.pop("initial_loss"), "peak_memory_exact": getattr(memory, "exact", True),
                 "build_peak_bytes": build_peak,
                 "model": _model_facts(prepared)}  # after finishing (pruning made permanent, QAT converted)
    if before is not None and after is not None:
        telemetry["sentinel"] = {"before_s": before["s"], "after_s": after["s"], "kernel": describe_kernel(prepared.device)}
    return TrialResult(ok=True, peak_memory_bytes=memory.peak_bytes(), phase_s=phases, telemetry=telemetry, **figures)


def _train(prepared: Any, workload: Any, train: Any, val: Any, settings: Any, timer: Any,
           phases: dict[str, float], memory_peak: Any) -> dict[str, Any]:
    bs = prepared.config.batch_size
    if bs > len(train):
        raise UnsupportedError(f"batch size {bs} is larger than the training set ({len(train)} samples)")
    optimizer = workload.optimizer(prepared.module.parameters())
    batches = _training_batches(prepared, workload, train, settings.seed)

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
            _check_finite(loss, i)
    phases["train"] = time.perf_counter() - t

    # 2. More timed steps if the timing has not settled yet, and 3. accuracy on the whole
    #    validation set (every rank evaluates it; rank 0 reports). Extra steps must not
    #    change the evaluated model: without finishing steps, evaluate first; with them
    #    (pruning, QAT: the model is converted after training) time first on a copy of
    #    the weights kept on the CPU, then restore, finish and evaluate.
    if prepared.finishers:
        peak = memory_peak()  # the extra steps repeat the same step: same peak
        more = _agree_more(prepared, not timer.done())  # every rank decides alike
        saved = _snapshot(prepared.module) if more else None
        _extra_timing(prepared, timer, step, phases, more)
        if saved is not None:
            prepared.module.load_state_dict(saved)
        t = time.perf_counter()
        prepared.finish()
        accuracy = _evaluate(prepared, workload, val)
        phases["eval"] = time.perf_counter() - t
    else:
        t = time.perf_counter()
        accuracy = _evaluate(prepared, workload, val)
        phases["eval"] = time.perf_counter() - t
        _extra_timing(prepared, timer, step, phases)
        peak = memory_peak()
    return {"accuracy": accuracy, "train_samples": steps * bs, "first_step_s": first_step_s,
            "final_loss": float(loss) if loss is not None else None, "peak_memory_bytes": peak}


def _probe(prepared: Any, workload: Any, train: Any, settings: Any, timer: Any,
           phases: dict[str, float], memory_peak: Any) -> dict[str, Any]:
    """Training steps until the timing settles (warm-up untimed), then stop: the speed and
    the steady-state peak memory of a full trial without its training budget or evaluation."""
    bs = prepared.config.batch_size
    if bs > len(train):
        raise UnsupportedError(f"batch size {bs} is larger than the training set ({len(train)} samples)")
    optimizer = workload.optimizer(prepared.module.parameters())
    batches = _training_batches(prepared, workload, train, settings.seed)
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
            _check_finite(loss, i)
        i += 1
        more = _agree_more(prepared, not (warm and timer.done()))
    _check_finite(loss, i - 1)
    phases["timing"] = time.perf_counter() - t
    return {"accuracy": None, "train_samples": i * bs, "first_step_s": first_step_s,
            "final_loss": float(loss) if loss is not None else None, "peak_memory_bytes": memory_peak(),
            "fingerprint": found}


_SENTINEL_ROUNDS = iter(range(1_000_000))


def _sentinel(prepared: Any) -> dict[str, Any] | None:
    """The sentinel's reading (rank 0 times it; None on the other ranks). The other ranks
    wait by sleeping on the process group's store, not in a collective, whose waiting can
    take CPU from the kernel being timed."""
    if prepared.world == 1:
        return read_sentinel(prepared.device)
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    key = f"advisor-sentinel-{next(_SENTINEL_ROUNDS)}"
    dist.barrier()
    store = distributed_c10d._get_default_store()
    if prepared.rank == 0:
        reading = read_sentinel(prepared.device)
        store.set(key, "done")
        return reading
    while not store.check([key]):
        time.sleep(0.002)
    return None


def _extra_timing(prepared: Any, timer: Any, step: Any, phases: dict[str, float], more: bool | None = None) -> None:
    """Timed steps until every rank's timer is done (``more``: already agreed for the first)."""
    t = time.perf_counter()
    timer.discard_open()  # the training budget's last steps: untimed work (evaluation, a snapshot) came since
    prepared.model.train()
    if more is None:
        more = _agree_more(prepared, not timer.done())
    while more:
        step(timed=True)
        more = _agree_more(prepared, not timer.done())
    phases["extra_timing"] = time.perf_counter() - t


def _snapshot(module: Any) -> dict[str, Any]:
    return {k: v.detach().to("cpu", copy=True) for k, v in module.state_dict().items()}


def _inference(prepared: Any, workload: Any, val: Any, settings: Any, timer: Any,
               phases: dict[str, float], memory_peak: Any) -> dict[str, Any]:
    import torch

    bs = prepared.config.batch_size
    if bs > len(val):
        raise UnsupportedError(f"batch size {bs} is larger than the validation set ({len(val)} samples)")
    batches = _cycle(prepared.loader(val, drop_last=True, collate_fn=workload.collate))
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
    accuracy = None
    if settings.stage != "probe":
        t = time.perf_counter()
        accuracy = _evaluate(prepared, workload, val)
        phases["eval"] = time.perf_counter() - t
    return {"accuracy": accuracy, "train_samples": 0, "first_step_s": first_step_s, "final_loss": None,
            "peak_memory_bytes": memory_peak()}


def _evaluate(prepared: Any, workload: Any, val: Any) -> float:
    import torch

    prepared.model.eval()
    total, weighted = 0, 0.0
    if workload.validate is not None:  # a Lightning module's validation epoch
        with torch.inference_mode():
            value = workload.validate(prepared.predict, prepared.loader(val, per_rank=False,
                                                                        collate_fn=workload.collate))
        return workload.metric_spec.score(check_metric(workload, value))
    with torch.inference_mode():
        for x, y in prepared.loader(val, per_rank=False):
            out = prepared.predict(x)
            n = len(y)
            weighted += check_metric(workload, workload.metric(out, prepared.to_device(y))) * n
            total += n
    return workload.metric_spec.score(weighted / total)  # the study compares scores: higher is better


def _agree_more(prepared: Any, more: bool) -> bool:
    """All ranks take another step if any rank's timer wants one (collectives stay paired)."""
    if prepared.world == 1:
        return more
    import torch
    import torch.distributed as dist

    flag = torch.tensor([int(more)], device=prepared.device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def _model_facts(prepared: Any) -> dict[str, Any]:
    from advisor.techniques.pruning import sparsity
    from advisor.techniques.quantization import quantized_layers

    try:
        facts = sparsity(prepared.module) | {"quantized_linear_layers": quantized_layers(prepared.module)}
    except Exception as exc:  # an exotic tensor subclass: report what we can
        facts = {"error": f"{type(exc).__name__}: {exc}"[:200]}
    return facts | prepared.stats


def _training_batches(prepared: Any, workload: Workload, train: Any, seed: int) -> Any:
    """The training batches, epoch after epoch (the workload told at each epoch's end)."""
    loader = prepared.loader(train, shuffle=True, seed=seed, drop_last=True, collate_fn=workload.collate)
    return _cycle(loader, workload.epoch_end)


def _cycle(loader: Any, epoch_end: Any = None) -> Any:
    epoch = 0
    while True:
        if hasattr(loader.sampler, "set_epoch"):
            loader.sampler.set_epoch(epoch)
        yield from loader
        if epoch_end is not None:  # when the next epoch's first batch is asked for
            epoch_end(epoch)
        epoch += 1


def _check_finite(loss: Any, step: int) -> None:
    value = float(loss)
    if not math.isfinite(value):
        raise NonFiniteLoss(f"loss became {value} at step {step}: this configuration diverged")
