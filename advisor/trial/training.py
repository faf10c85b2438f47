"""The training part of a trial (two-stage evaluation's second part: its training run),
and the probe's fingerprint that decides whether a measured metric may be reused.

A training run trains the study's sample budget from the study's seed, exactly as a full
trial does, but times nothing: at the points of ``advisor.core.two_stage.curve_points`` it
records the learning curve (mean training loss since the previous point, the metric on
the whole validation set) and asks the gate (``TrialPayload.gate``) whether to go on. A
run the gate stops is evaluated where it stopped and says so (``early_stop``); every rank
stops together.
"""

from __future__ import annotations

import functools
import math
import time
from typing import Any

from advisor.core.two_stage import Gate, curve_points
from advisor.trial.shared import agree_more, check_batch_fits, evaluate, training_batches


def fingerprint(prepared: Any, losses: list[float]) -> dict[str, Any]:
    """The first training steps' losses and a summary of the model's state after them:
    for every floating tensor (weights and buffers), its sum, sum of squares and size."""
    import torch

    state = []
    with torch.no_grad():
        for name, value in prepared.module.state_dict().items():
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                local = value.to_local() if hasattr(value, "to_local") else value  # a DTensor shard
                v = local.detach().double()
                state.append([name, float(v.sum()), float((v * v).sum()), v.numel()])
    return {"steps": len(losses), "losses": losses, "state": state}


def training_run(prepared: Any, workload: Any, train: Any, val: Any, settings: Any, gate_data: Any,
                 phases: dict[str, float]) -> dict[str, Any]:
    """Train the sample budget with a learning curve and the gate; evaluate."""
    from advisor.trial.errors import NonFiniteLoss

    bs = prepared.config.batch_size
    check_batch_fits(bs, train)
    gate = Gate.from_dict(gate_data)
    steps = max(1, round(settings.train_samples / bs))
    points = list(gate.points) if gate is not None else curve_points(settings.train_samples)
    # the step after which each point is reached (samples seen >= the point), before the last step
    at_step = {}
    for index, samples in enumerate(points):
        step = math.ceil(samples / bs)
        if step < steps and step not in at_step:
            at_step[step] = index
    optimizer = workload.optimizer(prepared.module.parameters())
    batches = training_batches(prepared, workload, train, settings.seed)
    curve: list[dict[str, Any]] = []
    early_stop: dict[str, Any] | None = None
    chunk: Any = 0.0
    initial_loss, behind_before = None, False
    chunk_steps, loss = 0, None
    t = time.perf_counter()
    curve_s = 0.0
    done = 0
    for i in range(1, steps + 1):
        x, y = next(batches)
        loss = prepared.train_step(x, y, workload.loss, optimizer)
        chunk = chunk + (loss.detach() if hasattr(loss, "detach") else loss)  # on the device: no sync a step
        if i == 1:
            initial_loss = float(chunk)
        chunk_steps += 1
        done = i
        diverged = (i % 10 == 0 or i in at_step) and not math.isfinite(float(chunk))
        if i in at_step or diverged:
            t_curve = time.perf_counter()
            mean_loss = float(chunk) / chunk_steps
            scored = functools.partial(evaluate, batch_size=settings.eval_batch_size)
            metric = _metric_or_none(prepared, workload, val, scored)
            index = at_step.get(i, len(curve))
            curve.append({"samples": i * bs, "loss": mean_loss, "metric": metric})
            reason = (gate.verdict(index, metric, mean_loss, behind_before, workload.metric_spec) if gate is not None
                      else (f"diverged: the loss became {mean_loss}" if diverged else None))
            behind_before = gate is not None and gate.behind(index, metric) is not None
            chunk, chunk_steps = 0.0, 0
            prepared.model.train()
            curve_s += time.perf_counter() - t_curve
            if agree_more(prepared, reason is not None):
                early_stop = {"samples": i * bs, "fraction": i / steps, "reason": reason or "another rank stopped",
                              "baseline_metric": (gate.baseline_metrics[index] if gate is not None
                                                  and index < len(gate.baseline_metrics) else None)}
                break
    phases["train"] = time.perf_counter() - t - curve_s
    phases["curve"] = curve_s
    t = time.perf_counter()
    if early_stop is not None:
        score = curve[-1]["metric"]
    else:
        if prepared.step.finishers:
            prepared.finish()
        score = evaluate(prepared, workload, val, settings.eval_batch_size)
    phases["eval"] = time.perf_counter() - t
    if score is None:  # the metric itself is not finite (a diverged model)
        raise NonFiniteLoss(f"{early_stop['reason'] if early_stop else 'diverged'} at {done * bs} samples, "
                            "and the metric cannot be computed on the diverged model")
    return {"score": score, "train_samples": done * bs, "final_loss": float(loss) if loss is not None else None,
            "curve": curve, "early_stop": early_stop, "initial_loss": initial_loss}


def _metric_or_none(prepared: Any, workload: Any, val: Any, evaluate: Any) -> float | None:
    """The metric on the validation set, or None where it is not finite."""
    import torch

    from advisor.core.errors import WorkloadError

    try:  # the random state as it was: training goes on exactly as without this evaluation
        devices = [prepared.device] if prepared.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            return float(evaluate(prepared, workload, val))
    except WorkloadError as exc:
        if "finite" in str(exc):
            return None
        raise
