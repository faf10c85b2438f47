"""``advisor export --format python``: a runnable script that applies an exported config
with ``advisor.apply()``, followed by the same setup in plain PyTorch, knob by knob, so a
user can keep the dependency or drop it."""

from __future__ import annotations

import pprint
import shlex
from typing import Any

from advisor.core.config import TrialConfig
from advisor.core.metric import MetricSpec
from advisor.core.units import fmt_bytes, fmt_rate
from advisor.machine.hardware import describe_fingerprint
from advisor.techniques.registry import TECHNIQUES

_SCRIPT = '''\
"""{title}

{measured}
Run it:  {run}
"""

import importlib.util
import os
import sys

import torch

import advisor
from advisor.workload.defaults import OUTPUT_LOSS, batch_len, default_loss, default_metric, output_loss  # the trials'

WORKLOAD = {workload!r}  # your model.py (the advisor contract)
{train_samples}EVAL_BATCH = {eval_batch}  # the batch the trials' validation ran in (the baseline's; None: the config's own)
SEED = {seed}  # the trials' seed: {seeded}
CONFIG = {config}


def load(path):
    folder = os.path.dirname(os.path.abspath(path))
    if folder not in sys.path:  # model.py's own imports of the modules beside it, as in the trials
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location("workload", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    w = load(WORKLOAD)
    # model.py's own word on splitting the model (tensor / pipeline parallelism), where it has one
    splits = {{name: getattr(w, name)() for name in ("tp_plan", "pipeline_split") if hasattr(w, name)}}
    train_set, val_set = w.datasets()  # read first, then seeded, as the trials do
    torch.manual_seed(SEED)
    prepared = advisor.apply(w.model(), CONFIG, workload={workload_kind!r}, **splits)
{train}
    metric = getattr(w, "metric", None) or default_metric  # top-1 accuracy over the scores, as in the trials
    prepared.model.eval()
    total, score = 0, 0.0
    with torch.inference_mode():
        batch = None if prepared.step.pipeline is not None else EVAL_BATCH  # a pipeline's stages take their own batch
        for x, y in prepared.loader(val_set, per_rank=False, collate_fn=getattr(w, "collate", None), batch_size=batch):
            out = prepared.predict(x)  # None on a pipeline's earlier stages: outputs come out of the last
            if out is not None:
                n = batch_len(x, y)  # samples in the batch (a dict target's len() would count its keys)
                score += float(metric(out, prepared.to_device(y))) * n
                total += n
    if prepared.reports:  # the only process, rank 0, or a pipeline's last stage
        print(f"validation metric {{score / total:.4f}} ({{total}} samples)")
    if torch.distributed.is_initialized():  # under torchrun: every rank done, then leave the group
        torch.distributed.barrier()
        if torch.distributed.get_backend() == "gloo":
            # gloo's teardown can abort a finished process (pytorch/pytorch#190489): leave without it
            sys.stdout.flush()
            os._exit(0)
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
'''

_TRAIN = '''\
    # model.py's loss(), or the model's own loss (LOSS = "output.loss"), or the trials' default
    loss_fn = getattr(w, "loss", None) or (output_loss if getattr(w, "LOSS", None) == OUTPUT_LOSS else default_loss)
    make_optimizer = getattr(w, "optimizer", None) or (lambda p: torch.optim.AdamW(p, lr=1e-3))
    optimizer = make_optimizer(prepared.module.parameters())
    # full batches, as the trials trained; model.py's collate() where it has one. A training
    # set that is a stream (an IterableDataset) keeps its own order, split among the ranks
    loader = prepared.loader(train_set, shuffle=True, seed=SEED, drop_last=True, collate_fn=getattr(w, "collate", None))
    steps, step, epoch = max(1, round(TRAIN_SAMPLES / CONFIG["batch_size"])), 0, 0
    while step < steps:  # epoch after epoch (a stream is read again from its start) until TRAIN_SAMPLES
        if hasattr(loader.sampler, "set_epoch"):
            loader.sampler.set_epoch(epoch)  # a new shuffle per epoch under DDP / FSDP
        if isinstance(loader.dataset, torch.utils.data.IterableDataset):
            loader.dataset.set_epoch(epoch)  # a stream's own set_epoch, where it has one (Hugging Face datasets)
        batches = 0
        for x, y in loader:
            prepared.train_step(x, y, loss_fn, optimizer)  # autocast, scaler, accumulation
            step, batches = step + 1, batches + 1
            if step == steps:
                break
        if not batches:
            sys.exit(f"one pass over the training set gave no full batch of {loader.batch_size} samples")
        epoch += 1
    prepared.finish()  # pruning made permanent, QAT converted to int8'''


def python_script(document: dict[str, Any], name: str = "this_file.py") -> str:
    """The export document as a runnable Python script plus the plain-PyTorch equivalent.

    Args:
        document: what ``advisor.outputs.export.export_document`` returns.
        name: the script's file name, for the launch command in its docstring.

    Example:
        >>> text = python_script(export_document(study, trial))  # doctest: +SKIP
    """
    if document.get("lightning") is not None:
        from advisor.outputs.lightning_export import lightning_script

        return lightning_script(document, _measured_line(document), name)
    source, config = document["source"], TrialConfig.from_dict(document["config"])
    kind = source.get("workload_kind") or "train"
    samples = source.get("train_samples") or 1
    script = _SCRIPT.format(
        title=f"Trial {source['trial']} of study {source['study']!r}, exported by advisor {source['exported']}.",
        measured=_measured_line(document), run=launch_command(config, name),
        workload=source.get("workload") or "model.py",
        train_samples="" if kind == "inference" else (f"TRAIN_SAMPLES = {samples}  # what each trial trained on before "
                                                      "evaluation (counted in full batches)\n"),
        seeded="the model's initial weights" + ("" if kind == "inference" else " and the training set's shuffle"),
        eval_batch=source.get("eval_batch_size"), seed=source.get("seed", 0),
        config=pprint.pformat(config.to_dict(), sort_dicts=False, width=100), workload_kind=kind,
        train="" if kind == "inference" else _TRAIN)
    return script + "\n" + plain_pytorch(config, kind)


def launch_command(config: TrialConfig, name: str) -> str:
    """How to run a script with this config: python, or torchrun with one process per rank."""
    if config.parallelism == "single":
        return f"python {shlex.quote(name)}"
    return f"torchrun --nproc-per-node={config.devices} {shlex.quote(name)}   (one process per rank)"


def _measured_line(document: dict[str, Any]) -> str:
    m, hw = document.get("measured") or {}, document.get("hardware") or {}
    where = describe_fingerprint(hw)
    if m.get("throughput") is None:
        return f"Measured on {where}."
    vs = m.get("vs_baseline") or {}

    def ratio(key: str, span: str) -> str:
        if vs.get(key) is None:
            return ""
        low_high, pairs = vs.get(span), vs.get("pairs") or 0
        if vs.get("confirmed") and low_high and low_high[1] is not None:
            return (f" ({vs[key]:.2f}x the baseline, 95% interval {low_high[0]:.2f}-{low_high[1]:.2f}, "
                    f"{pairs} pair{'s' if pairs != 1 else ''})")
        return f" ({vs[key]:.2f}x the baseline, unconfirmed)"

    metric = MetricSpec.from_dict(m.get("metric"))
    delta = f" ({metric.delta_text(vs['metric_delta'])})" if vs.get("metric_delta") is not None else ""
    shown = (m.get("metric") or {}).get("value")  # the figure the delta is of (a seed mean where it trained more)
    score = metric.sign * shown if isinstance(shown, (int, float)) else m["score"]
    return (f"Measured on {where}:\n  {fmt_rate(m['throughput'])} samples/s{ratio('throughput_ratio', 'throughput_interval')}, "
            f"{fmt_bytes(m['peak_memory_bytes'])} peak memory{ratio('memory_ratio', 'memory_interval')}, "
            f"{metric.name} {metric.value_text(score)}{delta}."
            + (f"\n  INFEASIBLE in its study: {_why_infeasible(vs)}." if m.get("feasible") is False else "")
            + (f"\n  Latency: {m['latency']['summary']}." if isinstance(m.get("latency"), dict)
               and m["latency"].get("summary") else ""))


def _why_infeasible(vs: dict[str, Any]) -> str:
    """Why an exported trial is outside its study's limits, as far as its document says (the
    console's ``infeasible_text`` reads the stored trial)."""
    if vs.get("metric_verdict") == "infeasible":
        return "its metric fell by more than --max-metric-drop allows (beyond the seeds' noise)"
    return "outside the study's limits (--max-metric-drop, --memory-cap or --max-latency-ms; advisor trials says which)"


def plain_pytorch(config: TrialConfig, kind: str = "train") -> str:
    """Each non-default knob's plain-PyTorch lines, as a commented block (``kind``
    inference: the model served, its batches read in order from the validation set)."""
    values = config.to_dict()
    default = TrialConfig().to_dict()
    serving = kind == "inference"
    lines = ["# ---- The same setup in plain PyTorch, knob by knob (what advisor.apply does) ----",
             f"# launch: {launch_command(config, 'serve.py' if serving else 'train.py')}"]
    if serving:
        lines.append("#\n# inference: model.eval(), and every forward pass under torch.inference_mode()")
    for key, technique in TECHNIQUES.items():
        value = values[key]
        if value == default[key] and key != "compile_mode":
            continue
        if key == "compile_mode" and (not config.compile or value == "default"):
            continue
        if key == "compile" and config.compile_mode != "default":
            continue  # the compile_mode snippet says it
        snippet = technique.snippet(value)
        if not snippet:
            continue
        snippet = snippet.replace("AMOUNT", f"{config.prune_amount:g}").replace("BUCKET_MB", str(config.bucket_mb))
        lines.append(f"#\n# {key} = {value!r}")
        lines.extend(f"#   {line}" for line in snippet.splitlines())
    ranks = config.data_ranks()
    lines.append(f"#\n# batch_size = {config.batch_size}\n#   loader = DataLoader("
                 + (f"val_set, batch_size={config.batch_size // ranks})" if serving else
                    f"train_set, batch_size={config.batch_size // ranks}, shuffle=True)")
                 + (f"  # per rank: {config.batch_size} / {ranks} data-parallel ranks" if ranks > 1 else ""))
    if ranks > 1 and not serving:
        lines.append(f"#   (a training stream, an IterableDataset, has no sampler: rank r keeps items r, r+{ranks}, "
                     f"r+{2 * ranks}, ... of it, as advisor's loader does)")
    return "\n".join(lines) + "\n"
