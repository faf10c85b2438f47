"""``advisor.tune(...)``: ``advisor tune`` from Python (a script, a notebook), taking the
pieces of a model.py as callables, or a model.py's path. Progress prints as the command's
does (rich renders it in a notebook too); the live explorer never opens. Returns a
``TuneResult``."""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from advisor.api.callables import write_workload
from advisor.api.result import TuneResult
from advisor.core.errors import AdvisorError, WorkloadError
from advisor.core.noise import NOISE_SEEDS
from advisor.core.pairs import DEFAULT_MAX_PAIRS, DEFAULT_TARGET, DEFAULT_TOP
from advisor.core.stored import read_study
from advisor.study.options.option import older_names, options_of
from advisor.study.options.tune_options import TuneOptions

OPTIONS = {o.name: field for field, o in options_of(TuneOptions).items()}  # keyword -> TuneOptions field
OLDER = older_names(TuneOptions)  # an older keyword (deprecated, still taken) -> TuneOptions field
KEYWORD = {field: keyword for keyword, field in OPTIONS.items()}


def tune(model: Callable[[], Any] | str | Path, datasets: Callable[[], Any] | None = None, *,
         loss: Callable[[Any, Any], Any] | str | None = None, metric: Callable[[Any, Any], float] | None = None,
         optimizer: Callable[[Any], Any] | None = None, baseline: dict[str, Any] | None = None,
         name: str | None = None, workdir: str | Path = ".advisor",
         workload: str = "train", space: str | None = None, trials: int = 20, storage: str | None = None,
         study: str | None = None, timeout: float | None = None, budget: float | str | None = None,
         trial_timeout: float | None = None, timing_tolerance: float | None = None,
         max_metric_drop: float | str = 0.01, memory_cap: int | str | None = None,
         max_latency_ms: float | None = None, train_samples: int | None = None,
         sampler: str = "default", seed: int = 0, ray_address: str | None = None, skip_preflight: bool = False,
         confirm: bool = True, confirm_top: int = DEFAULT_TOP, pairs: int = DEFAULT_MAX_PAIRS,
         confirm_target: float = DEFAULT_TARGET, metric_seeds: int = NOISE_SEEDS, train: str = "selective",
         ignore_doctor: bool = False, log_to: str | Sequence[str] = (), progress: bool = True,
         **older: Any) -> TuneResult:
    """Tune a model from Python; the keyword options are ``advisor tune``'s flags
    (``advisor.study.options.tune_options.TuneOptions`` declares both; a test keeps them equal).

    ``model`` and ``datasets`` (and optionally ``loss``, ``metric``, ``optimizer``) are
    the model.py contract's functions, each defined at the top level of an importable
    module (a trial runs in a fresh process, which imports them); ``loss="output.loss"``
    for a model that returns its own loss; ``baseline`` is model.py's BASELINE. Or pass a
    model.py's path as ``model`` and nothing else of the contract.

    ``log_to="mlflow"`` (or ``"mlflow,tensorboard"``, or a list) logs each trial to
    experiment trackers as it is stored (``advisor.outputs.trackers``), in this process.

    The callables become a small model.py of import lines under ``workdir`` (named
    ``NAME-HASH.py``, NAME defaulting to the model function's name), which the study
    records as its workload; calling again with the same callables resumes the study.

    The older keywords ``max_accuracy_drop``, ``accuracy_seeds`` and ``accuracy`` (now
    ``max_metric_drop``, ``metric_seeds``, ``train``) still work, with a DeprecationWarning.

    Raises an AdvisorError subclass (the command's exit status 2 cases) for bad input,
    before anything runs.
    """
    given = {OPTIONS[key]: value for key, value in locals().items() if key in OPTIONS}  # the options, as passed
    given.update(_older(older, given))
    import optuna

    from advisor.core.events import chain
    from advisor.outputs.console import TuneOutput
    from advisor.outputs.dashboard import DashboardNotes
    from advisor.outputs.trackers import open_trackers
    from advisor.study.run.plan import plan_study
    from advisor.study.run.tuner import Tuner

    options = TuneOptions.given("", given, python=True).check(python=True)
    folder = Path(workdir).expanduser().resolve()
    folder_was_there = folder.exists()
    path, label, created = _workload_path(model, datasets, loss, metric, optimizer, baseline, name, Path(workdir))
    options = replace(options, workload_path=str(path))
    if study is None and label is not None:  # named after the model function, not the written file
        options = replace(options, study_name=f"{label}-{options.space_name}")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        plan = plan_study(options)
        trackers = open_trackers(plan, python=True)
    except AdvisorError as exc:  # any refusal (a space, a tracker, the storage): nothing left behind
        if label is not None:  # the model.py written for the callables: say it in the call's terms
            if created:
                path.unlink(missing_ok=True)  # written by this call, refused
                if not folder_was_there:
                    with contextlib.suppress(OSError):
                        folder.rmdir()  # made by this call, empty again
            text = str(exc).replace(f"{path}: BASELINE", "advisor.tune(baseline=...)")
            text = text.replace("BASELINE.", "baseline.").replace(str(path), "the model.py tune() writes for them")
            exc.args = (text,)
        raise
    output = TuneOutput(quiet=not progress)
    output.planned(plan)
    notes = DashboardNotes(plan.storage_url, plan.study_name)  # optuna-dashboard's notes, when it is installed
    trackers.notify = notes.notify = output.event
    try:
        outcome = Tuner(plan, on_event=chain(output.event, trackers.event, notes.event)).run()
    except BaseException:
        trackers.close(None)  # the trackers' study runs closed as failed
        raise
    trackers.close(outcome)
    notes.close()
    if progress:
        output.finish(plan, outcome)
    return TuneResult.of(read_study(outcome.study), plan.storage_url, str(path), outcome.stop_reason)


def _older(older: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """The options passed by an older keyword (keyed by field), each with a DeprecationWarning;
    a TypeError for a keyword tune() never had, or for an older one passed with its new name."""
    fields = {}
    for keyword, value in older.items():
        if keyword not in OLDER:
            raise TypeError(f"tune() got an unexpected keyword argument {keyword!r}")
        field = OLDER[keyword]
        new = KEYWORD[field]
        default = TuneOptions.__dataclass_fields__[field].default
        if field in fields or given[field] != default:
            raise TypeError(f"tune() got {keyword}= and {new}=: {keyword} is {new}'s older name; pass {new}= alone")
        warnings.warn(f"advisor.tune({keyword}=...) is deprecated: it is {new}= now", DeprecationWarning, stacklevel=3)
        fields[field] = value
    return fields


def _workload_path(model: Any, datasets: Any, loss: Any, metric: Any, optimizer: Any, baseline: Any,
                   name: str | None, workdir: Path) -> tuple[Path, str | None, bool]:
    """The model.py to tune, the name of the callables' study (None for a path), and whether
    this call wrote that file (for callables: the same callables reuse theirs)."""
    if isinstance(model, (str, Path)):
        given = [k for k, v in (("datasets", datasets), ("loss", loss), ("metric", metric),
                                ("optimizer", optimizer), ("baseline", baseline)) if v is not None]
        if given:
            raise WorkloadError(f"advisor.tune({str(model)!r}, {', '.join(given)}=...): a model.py path brings its "
                                "own contract; pass its path alone, or pass callables for model and datasets")
        return Path(model).expanduser().resolve(), None, False
    if datasets is None:
        raise WorkloadError("advisor.tune(model=...): datasets is required (a function returning (train, validation))")
    pieces = {"model": model, "datasets": datasets, "loss": loss, "metric": metric, "optimizer": optimizer}
    if name is not None and not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise WorkloadError(f"advisor.tune(name={name!r}): use letters, digits, '_', '-' or '.'")
    label = name or re.sub(r"[^A-Za-z0-9_.-]", "_", str(getattr(model, "__name__", "model")))
    path, created = write_workload(pieces, baseline, label, workdir.expanduser().resolve())
    return path, label, created
