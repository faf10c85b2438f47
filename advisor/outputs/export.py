"""Choose a trial (by number or by a pick rule) and write its configuration to a file:
the export document (``advisor.core.export_format``) as YAML or JSON, a runnable Python
script, or the same settings in the terms of the places users train: transformers'
TrainingArguments (hf), an accelerate config, a torchrun launch."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any

from advisor.core.errors import ConfigError, StudyError
from advisor.core.export_format import FORMAT_VERSION, config_sha256, serialise, write_atomically
from advisor.core.stored import (
    DISTURBED_BASELINE_NOTE,
    METRIC_REUSED,
    SCORE,
    SCORE_OUT,
    TRAINING_SKIPPED,
    StoredStudy,
    TrialRecord,
)

FORMATS = ("yaml", "json", "python", "hf", "accelerate", "torchrun")
# a format in another tool's terms -> the export document's key for its section
TARGETS = {"hf": "transformers", "accelerate": "accelerate", "torchrun": "torchrun"}
# what each format writes, and the file names that say so
_WRITES = {"yaml": "a YAML config", "json": "a JSON config", "python": "a Python script", "hf": "a Python module",
           "accelerate": "accelerate's YAML config", "torchrun": "a shell script"}
_SUFFIX_FORMAT = {".yaml": "yaml", ".yml": "yaml", ".json": "json", ".py": "python", ".sh": "torchrun"}
_SUFFIX_KIND = {".yaml": "YAML", ".yml": "YAML", ".json": "JSON", ".py": "Python", ".sh": "shell"}
_KIND_OF = {"yaml": "YAML", "json": "JSON", "python": "Python", "hf": "Python", "accelerate": "YAML", "torchrun": "shell"}


def output_format(path: str | Path | None, fmt: str | None, said: str | None = None) -> str:
    """The format to write: ``fmt`` when given, else the one ``path``'s suffix names (.yaml,
    .yml, .json, .py, .sh), else yaml. Refuses (ConfigError) a format whose file kind the
    name contradicts: a review's ``export("best.yaml", format="hf")`` wrote Python into a
    .yaml that load_config then failed on. Other suffixes (none, .txt, .cfg) take any format.
    ``said``: how the caller asked for ``fmt``, for the error (default ``--format FMT``)."""
    said = said or f"--format {fmt}"
    if fmt is not None and fmt not in FORMATS:
        raise ConfigError(f"{said} is unknown (expected one of {', '.join(FORMATS)})")
    suffix = Path(path).suffix.lower() if path is not None else ""
    if fmt is None:
        return _SUFFIX_FORMAT.get(suffix, "yaml")
    if suffix in _SUFFIX_KIND and _SUFFIX_KIND[suffix] != _KIND_OF[fmt]:
        fits = sorted(f for f, kind in _KIND_OF.items() if kind == _SUFFIX_KIND[suffix])
        ext = {"YAML": ".yaml", "JSON": ".json", "Python": ".py", "shell": ".sh"}[_KIND_OF[fmt]]
        raise ConfigError(f"{said} writes {_WRITES[fmt]}, but {str(path)!r} is named as a "
                          f"{_SUFFIX_KIND[suffix]} file: name it {Path(path).with_suffix(ext).name!r}, or write "
                          f"{' or '.join(fits)} to that name")
    return fmt


def trial_by_number(study: StoredStudy, number: int) -> TrialRecord:
    """The completed trial ``number``; a duplicate resolves to the trial it repeated."""
    if not 0 <= number < len(study.records):
        raise StudyError(f"study {study.name!r} has no trial {number} (trials 0-{len(study.records) - 1})")
    record = study.records[number]
    if record.duplicate_of is not None:
        record = study.records[record.duplicate_of]
    if record.state == "probed":
        raise StudyError(f"trial {number} of study {study.name!r} was probed only (speed and memory; no training run "
                         f"was needed: {record.get(TRAINING_SKIPPED)}); nothing to export: its "
                         f"{study.metric.name} is unknown. Run it with `advisor measure` on a config file you write, "
                         "or tune with --train all")
    if record.state != "complete":
        cls = record.failure_class or record.state
        raise StudyError(f"trial {number} of study {study.name!r} did not complete ({cls}): "
                         f"{record.failure_message or 'no result'}; nothing to export")
    return record


def _seed_score(study: StoredStudy, record: TrialRecord) -> float | None:
    """The score of ``record``'s run at the study's seed: its own, or for a metric reused from
    another trial, that trial's (older studies stored a reused metric at its seed mean)."""
    other = study.record_of(record.get(METRIC_REUSED))
    value = (other if other is not None else record).get(SCORE)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def export_document(study: StoredStudy, record: TrialRecord) -> dict[str, Any]:
    """The export file's content: the config, where it came from, what was measured."""
    assert record.config is not None
    # the score the study compares: the seed mean where the trial trained with more seeds (its first seed's
    # alone is stored with the trial; a review read 0.8333 here beside the metric's 0.8370)
    score = record.figures.score if record.figures is not None else record.get(SCORE)
    measured = {"throughput": study.shown_throughput(record) if record.baseline else record.get("throughput"),
                "peak_memory_bytes": record.get("peak_memory_bytes"),
                SCORE_OUT: score, **{k: record.get(k) for k in ("step_time_median_s", "step_time_iqr_s",
                                                                            "compile_s")}}
    if record.baseline and study.shown_baseline_reference is not None:  # its own run was disturbed
        measured |= {"throughput_first_run": record.get("throughput"), "throughput_note": DISTURBED_BASELINE_NOTE}
    if record.get("energy_per_sample_j") is not None:  # a GPU's energy counter, over the timed steps
        measured["energy_per_sample_j"] = record.get("energy_per_sample_j")
    if record.latency is not None:  # an inference trial's per-request latency (advisor.core.latency)
        measured["latency"] = record.latency.to_dict() | {
            "summary": f"{record.latency.text()} (single forward calls, each synchronised; on this study's hardware)"}
    own = _seed_score(study, record)
    if own is not None:  # its run at the study's seed alone: what `advisor measure` runs again
        measured["seed_score"] = own
    if record.figures is not None:  # the metric as itself ("score" above is its score: higher is better)
        measured["metric"] = study.metric.to_dict() | {"value": study.metric.shown(record.figures.score)}
    if record.figures is not None and not record.feasible:  # said; a feasible trial's export is as it was
        measured["feasible"] = False
    if study.baseline is not None and record.figures is not None:
        measured["vs_baseline"] = study.versus_baseline(record).to_dict()
        confirmation = study.confirmations.get(record.number)
        if confirmation is not None:
            measured["confirmation"] = confirmation.to_dict()
    u = study.attrs
    return {
        "advisor_config": FORMAT_VERSION,
        "config": record.config.to_dict(),  # every knob, also for older studies
        "source": {
            "study": study.name,
            "trial": record.number,
            "workload": u.get("workload_path"),
            "workload_sha256": u.get("workload_sha256"),
            "config_sha256": config_sha256(record.config),  # what `measured` is of (a hand edit breaks it)
            "workload_kind": u.get("workload", "train"),  # apply(..., workload=this)
            "model_parameters": u.get("workload_parameters"),  # what model() built: apply() warns on another model
            "model_weights_dtype": u.get("workload_weights_dtype"),  # ... and refuses it cast to another dtype
            "train_samples": u.get("settings", {}).get("train_samples"),
            "seed": (u.get("settings") or {}).get("seed", 0),  # the trials' (initial weights, shuffle)
            "exported": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        } | ({"eval_batch_size": u["settings"]["eval_batch_size"]}  # the trials' validation batch (newer studies)
             if (u.get("settings") or {}).get("eval_batch_size") else {}),
        "measured": measured,
        # the configuration the ratios are to (advisor measure runs it beside this one)
        "baseline": study.baseline.config.to_dict() if study.baseline and study.baseline.config else None,
        "hardware": u.get("hardware", {}),
    } | (_lightning(record.config, u) if u.get("workload_format") == "lightning" else {})


def _lightning(config: Any, attrs: dict[str, Any]) -> dict[str, Any]:
    """A Lightning file's export also says the config in Lightning's terms."""
    from advisor.outputs.lightning_export import lightning_arguments

    parts = attrs.get("workload_parts") or {}
    return {"lightning": lightning_arguments(config),
            "lightning_parts": {"module": parts.get("model", "model()"), "data": parts.get("datamodule", "datamodule()")}}


def with_target(document: dict[str, Any], fmt: str) -> dict[str, Any]:
    """The document with the section of a format in another tool's terms (``TARGETS``):
    its settings, what has no equivalent there (``not_covered``) and what
    ``advisor.apply()`` still sets. Raises ConfigError where that tool cannot take the
    study (inference for TrainingArguments, a Lightning file for hf and accelerate)."""
    if fmt not in TARGETS or TARGETS[fmt] in document:
        return document
    if fmt == "hf":
        from advisor.outputs.hf_export import hf_section as section
    elif fmt == "accelerate":
        from advisor.outputs.launch_export import accelerate_section as section
    else:
        from advisor.outputs.launch_export import torchrun_section as section
    return document | {TARGETS[fmt]: section(document)}


def render(document: dict[str, Any], fmt: str = "yaml", name: str = "this_file.py") -> str:
    """The export document as a config file (yaml, json), a runnable script (python,
    ``name`` being the script's file name), or in another tool's terms (hf: a Python
    module of TrainingArguments; accelerate: its config YAML; torchrun: a shell script)."""
    if fmt == "python":
        from advisor.outputs.python_script import python_script

        return python_script(document, name)
    if fmt == "hf":
        from advisor.outputs.hf_export import hf_snippet

        return hf_snippet(with_target(document, fmt))
    if fmt in ("accelerate", "torchrun"):
        from advisor.outputs.launch_export import accelerate_yaml, torchrun_script

        document = with_target(document, fmt)
        return accelerate_yaml(document) if fmt == "accelerate" else torchrun_script(document)
    if fmt not in FORMATS:
        raise ConfigError(f"unknown export format {fmt!r} (expected {', '.join(FORMATS)})")
    return serialise(document, fmt)


def write_export(document: dict[str, Any], path: str | Path | None, fmt: str = "yaml") -> str:
    """Render the document; write it to ``path`` atomically when given. Returns the text."""
    text = render(document, fmt, Path(path).name if path is not None else "this_file.py")
    if path is not None:
        write_atomically(path, text)
    return text
