"""Planning a study: everything that can fail on bad input is checked here, before Ray
starts and before storage is written (``plan_study``); then the study is created or
resumed (``open_study``)."""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from advisor.core.config import TrialConfig
from advisor.core.errors import SpaceError, StudyError, WorkloadError
from advisor.core.events import Listener, Note, ignore
from advisor.core.objectives import DIRECTIONS, OBJECTIVES
from advisor.core.results import TrialSettings, default_train_samples
from advisor.core.study_attrs import IDENTITY_MARK, METRIC, TRAINING_BUDGET, StudyAttrs, being_created
from advisor.machine.doctor_store import DROP_PREFIX, Verdict, failures
from advisor.machine.hardware import Hardware, detect, fingerprint
from advisor.runner.cluster import cluster_hardware
from advisor.search.samplers import make_sampler
from advisor.search.space import Dropped, SearchSpace, filter_space, load_space, value_refusal
from advisor.study.options.option import declared, must_match
from advisor.study.options.tune_options import TuneOptions
from advisor.study.storage import stores
from advisor.study.storage.guard import shown_url
from advisor.techniques.registry import TECHNIQUES, preloads
from advisor.techniques.rules import refusal
from advisor.workload.contract import Workload, load_workload
from advisor.workload.local_modules import local_modules
from advisor.workload.preflight import preflight

if TYPE_CHECKING:
    import optuna

# Study attributes that must match for a resumed study's trials to stay comparable: those the
# plan derives (not options of their own: the model.py's content, the space as filtered here,
# the trial settings), then the options TuneOptions marks must_match (advisor.study.options.tune_options).
DERIVED_MUST_MATCH = ("workload_sha256", "workload_modules", "space", "settings")
# the settings that say how a timing stops (not what is measured): a resumed study takes today's
TIMING_METHOD = ("warmup_steps", "min_steps", "warmup_s", "timing_tolerance")
MUST_MATCH = DERIVED_MUST_MATCH + tuple(attr for _, attr in must_match(TuneOptions))
# a stored option named as the user gives it (the flag), not by its study attribute
_FLAG_OF = {o.must_match: o.flag for _, o in declared(TuneOptions) if o.must_match and o.flag}
_FLAG_OF["max_drop_relative"] = "--max-metric-drop as a percentage"


@dataclass(frozen=True)
class StudyPlan:
    """A study ready to run: its options and everything derived from them."""

    options: TuneOptions
    workload: Workload
    facts: dict[str, Any]  # what the preflight found (sizes, parameters, layers)
    hardware: Hardware
    space: SearchSpace  # filtered for this machine and workload
    baseline: TrialConfig
    settings: TrialSettings
    study_name: str
    storage_url: str
    # the default training budget as decided before the study (advisor.study.run._training_budget); None: not in play
    training_budget: dict[str, Any] | None = None

    def preload(self) -> tuple[str, ...]:
        """What the trials of this space import lazily (``Technique.preload``: compile's
        inductor, a pipeline's tracer, torchao), for the executor's fork servers."""
        values = [(k.name, v) for k in self.space.knobs for v in k.choices]
        return preloads([*self.baseline.to_dict().items(), *values])

    def study_attrs(self) -> dict[str, Any]:
        """What the study stores about itself (checked again when it is resumed)."""
        return {
            IDENTITY_MARK: str(self.workload.path),
            "workload_sha256": self.workload.sha256,
            "workload_modules": local_modules(self.workload.path, self.workload.source),  # helpers beside it
            "workload_parameters": self.facts.get("parameters"),  # what model() built (None: no preflight)
            "workload_weights_dtype": self.facts.get("weights_dtype"),  # ... and its weights' dtype
            "workload": self.options.workload,
            "workload_format": self.workload.kind,  # "model.py" or "lightning" (export speaks its terms)
            "workload_parts": {role: self.workload.names[role] for role in ("model", "datamodule")
                               if role in self.workload.names},
            "space_name": self.space.name,
            "space": self.space.to_dict(),
            "dropped_options": [[d.knob, d.value, d.reason] for d in self.space.dropped],
            "settings": self.settings.to_dict(),
            "hardware": fingerprint(self.hardware),
            **{attr: getattr(self.options, field) for field, attr in must_match(TuneOptions)},
            METRIC: self.workload.metric_spec.to_dict(),
            "objectives": list(OBJECTIVES),
            **({TRAINING_BUDGET: self.training_budget} if self.training_budget is not None else {}),
        }


def plan_study(options: TuneOptions) -> StudyPlan:
    """Check the options, load and preflight model.py, load and filter the space, check the
    baseline and the storage. Raises an AdvisorError (exit status 2) naming what is wrong;
    writes nothing."""
    options.check()
    url = stores.storage_url(options.storage)
    stores.check_storage(url)  # first, as cheap checks go; opened (a SQLite file created) when the study runs
    workload = load_workload(options.workload_path)
    facts = {"workload": options.workload} | ({} if options.skip_preflight else preflight(workload, options.workload))
    space = load_space(options.space_name)
    hardware = detect() if not options.ray_address else cluster_hardware(options.ray_address)
    filtered = filter_space(space, hardware, facts)
    if not options.ignore_doctor:  # what failed `advisor doctor` on this machine
        filtered = drop_failed(filtered, hardware, facts, failures(fingerprint(hardware), workload.sha256))
    baseline = TrialConfig.from_dict(workload.baseline, where="BASELINE", source=str(workload.path))
    reason = refusal(baseline, options.workload, hardware.device) or baseline_refusal(baseline, hardware, facts)
    if reason:
        raise WorkloadError(f"{workload.path}: BASELINE: {reason}")
    study_name = stores.check_study_name(options.study_name or f"{workload.name}-{space.name}")
    if options.workload == "inference":
        train_samples = options.train_samples or 1  # not used: inference trials do not train
    else:
        train_samples = options.train_samples or default_train_samples(facts["train_size"])
    fixed = {} if options.timing_tolerance is None else {"timing_tolerance": options.timing_tolerance}
    settings = TrialSettings(train_samples=train_samples, seed=options.seed, device=hardware.device,
                             workload=options.workload, eval_batch_size=baseline.batch_size, **fixed)
    return StudyPlan(options, workload, facts, hardware, filtered, baseline, settings, study_name, url)


def baseline_refusal(baseline: TrialConfig, hw: Hardware, facts: dict[str, Any]) -> str | None:
    """Why a knob BASELINE sets cannot run on ``hw`` or can do nothing for this model (what
    the search drops from the space, ``filter_space``), or None: the baseline is the trial
    every other is measured against, so it must run as set."""
    default = TrialConfig().to_dict()
    facts = facts | {"device": hw.device}
    for key, value in baseline.to_dict().items():
        if key not in TECHNIQUES or value == default[key]:
            continue
        why = value_refusal(key, value, hw, facts)
        if why:
            return (f"{key}={json.dumps(value)}: {why}; set it to its default ({json.dumps(default[key])}) "
                    "or leave it out")
    return None


def drop_failed(space: SearchSpace, hw: Hardware, facts: dict[str, Any], failed: list[Verdict]) -> SearchSpace:
    """``space`` without the options that failed ``advisor doctor`` here (each dropped
    with its reason); knobs whose condition can no longer hold go too, as after the
    hardware's refusals. A knob left with no option is a SpaceError."""
    if not failed:
        return space
    bad: dict[tuple[str, str], Verdict] = {}
    for v in failed:  # the built-in model's verdicts come first and win
        bad.setdefault((v.knob, json.dumps(v.value)), v)
    knobs, dropped, problems = [], [], []
    for knob in space.knobs:
        keep = [c for c in knob.choices if (knob.name, json.dumps(c)) not in bad]
        gone = [Dropped(knob.name, c, bad[(knob.name, json.dumps(c))].drop_reason)
                for c in knob.choices if c not in keep]
        if not keep:
            problems.append(f"{knob.name}: no option left ({'; '.join(f'{d.value!r}: {d.reason}' for d in gone)}); "
                            "advisor tune --ignore-doctor keeps them")
        dropped.extend(gone)
        knobs.append(replace(knob, choices=tuple(keep)))
    if problems:
        raise SpaceError(f"{space.name!r} on this machine", problems)
    return filter_space(SearchSpace(space.name, tuple(knobs), space.dropped + tuple(dropped)), hw, facts)


def open_study(plan: StudyPlan, storage: Any, on_event: Listener = ignore,
               creation_wait_s: float | None = None) -> optuna.Study:
    """Create the study, or resume it when its setup matches (else StudyError, writing
    nothing). Trials a killed driver left running are marked failed when this driver joins
    it (``advisor.study.run._drivers.join_study``). A study another driver is creating is
    waited for, up to ``creation_wait_s`` (``stores.summary``; by default
    ``stores.CREATION_WAIT_S``, read when called)."""
    import optuna

    if creation_wait_s is None:
        creation_wait_s = stores.CREATION_WAIT_S

    attrs = plan.study_attrs()
    found = stores.summary(storage, plan.study_name, wait_s=creation_wait_s,
                           on_wait=lambda text: on_event(Note(text)))
    if found is not None and not stores.is_advisor_study(found):
        raise StudyError(f"a study named {plan.study_name!r} in {shown_url(plan.storage_url)} is another program's "
                         "Optuna study, not advisor's: advisor would not add its trials to it"
                         + (" (or an `advisor tune` stopped as it created it: it holds no trial and no identity)"
                            if being_created(found.user_attrs, len(found.directions), found.n_trials) else "")
                         + ". Use --study NEW_NAME")
    study = optuna.create_study(storage=storage, study_name=plan.study_name, load_if_exists=True,
                                directions=list(DIRECTIONS),
                                sampler=make_sampler(plan.options.sampler, plan.options.seed))
    # another driver may have created it since it was looked for: its identity, once written, is checked
    exists = found is not None or IDENTITY_MARK in StudyAttrs(study).all()
    if exists:
        try:
            _check_resumable(plan, study, attrs, on_event)
        except StudyError:
            from advisor.study.run._drivers import Drivers, nothing_measured

            if found is None or not nothing_measured(study, Drivers(study)):
                raise  # (one another driver created since this one looked is that driver's to run)
            # an earlier run's baseline failed and nothing else ran (a version that kept such
            # studies): replaced, so that the fixed model.py runs with the same command
            optuna.delete_study(study_name=plan.study_name, storage=storage)
            on_event(Note(f"study {plan.study_name!r} held only a failed baseline, nothing measured: replaced by "
                          "this setup's"))
            return open_study(plan, storage, on_event)
    else:
        StudyAttrs(study).write_identity(attrs)
        # two drivers that both found no study both write an identity; the last one written
        # is the study's, and a driver whose setup it is not stops here as on resuming
        _check_resumable(plan, study, attrs, ignore)
        # what optuna-dashboard and other Optuna tools call the three values (an API Optuna
        # marks experimental since 3.2; it warns on every call)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(["throughput", "peak_memory_bytes", plan.workload.metric_spec.objective_name])
    return study


def _differs(key: str, then: Any, now: Any) -> str:
    """'settings: train_samples 256 then, 2550 now' (at most 4 of a record's fields)."""
    def shown(value: Any) -> str:
        text = json.dumps(value, sort_keys=True, default=str)
        return text if len(text) <= 40 else text[:16] + "..."

    if key == "workload_modules" and isinstance(then, dict) and isinstance(now, dict):
        changed = [f"{name} {'changed' if name in then and name in now else 'new' if name in now else 'gone'}"
                   for name in sorted({*then, *now}) if then.get(name) != now.get(name)]
        return "the modules beside model.py that it imports: " + ", ".join(changed)
    if key == "workload_parameters":
        return f"the model's parameters: {then:,} then, {now:,} now"
    if key == "workload_weights_dtype":
        return f"the model's weights: {then} then, {now} now"
    if key == "workload_sha256":  # its hash says only that: not which line
        return f"model.py's content changed (sha256 {str(then)[:12]}... then, {str(now)[:12]}... now)"
    if key in _FLAG_OF:
        if isinstance(then, bool) and isinstance(now, bool):
            return f"{_FLAG_OF[key]}: {'yes' if then else 'no'} then, {'yes' if now else 'no'} now"
        return f"{_FLAG_OF[key]}: {shown(then)} then, {shown(now)} now"
    if isinstance(then, dict) and isinstance(now, dict):
        keys = sorted(k for k in {*then, *now} if then.get(k) != now.get(k))
        parts = [f"{k} {shown(then.get(k))} then, {shown(now.get(k))} now" for k in keys[:4]]
        return f"{key}: " + ", ".join(parts) + (f" (and {len(keys) - 4} more)" if len(keys) > 4 else "")
    return f"{key}: {shown(then)} then, {shown(now)} now"


def _check_resumable(plan: StudyPlan, study: optuna.Study, attrs: dict[str, Any], on_event: Listener) -> None:
    old = StudyAttrs(study).all()
    method: list[str] = []
    if isinstance(old.get("settings"), dict):  # studies from older versions lack newer fields
        raw = old["settings"]
        stored = TrialSettings.from_dict({"train_samples": 0, **raw}).to_dict()
        # how a timing stops is the version's, not the study's: the figure is the same median
        method = [k for k in TIMING_METHOD if stored.get(k) != attrs["settings"][k] or k not in old["settings"]]
        old["settings"] = stored | {k: attrs["settings"][k] for k in TIMING_METHOD}
        if "eval_batch_size" not in raw:  # an older version's study: each trial's batch evaluated it (the same
            old["settings"]["eval_batch_size"] = attrs["settings"]["eval_batch_size"]  # for averaging metrics)
    diffs = [k for k in MUST_MATCH if k in old and old[k] != attrs[k]]
    for key in ("workload_parameters", "workload_weights_dtype"):  # a file or variable model.py reads, say
        if None not in (old.get(key), attrs[key]) and old[key] != attrs[key]:
            diffs.append(key)
    if diffs:
        doctor = "space" in diffs and any(d.reason.startswith(DROP_PREFIX) for d in plan.space.dropped)
        raise StudyError(
            f"study {plan.study_name!r} in {shown_url(plan.storage_url)} was run with another setup: "
            f"{'; '.join(_differs(k, old[k], attrs[k]) for k in diffs)}; "
            + ("its trials would not be comparable. " if set(diffs) - set(_FLAG_OF) else
               "its trials' verdicts and front were reached with the values it stored. ") +
            "Use --study NEW_NAME for a new study "
            "(or run the original setup again to resume it" +
            ("; advisor doctor's verdicts drop options from its space here: --ignore-doctor keeps them)"
             if doctor else ")"))
    if method:
        on_event(Note("this study's earlier trials were timed by an older version's stopping rule; new trials "
                      "time their steps until the median settles (advisor.core.settle): the same figure, "
                      "known to a stated tolerance"))
    if old.get("hardware") != attrs["hardware"]:
        on_event(Note("this machine's hardware fingerprint differs from the one the study started on; "
                      "new trials are measured here"))
