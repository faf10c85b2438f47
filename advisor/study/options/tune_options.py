"""``TuneOptions``: what a study is asked to do, and their validation. Each field declares
its option once (``advisor.study.options.option``): ``advisor tune``'s flag and help,
``advisor.tune()``'s keyword, how a value is read, its environment variable, whether a
resumed study must match it. Problems name the option as the caller wrote it."""

from __future__ import annotations

import dataclasses
import importlib.util
import math
from dataclasses import dataclass
from typing import Any

from advisor.core.errors import StudyError
from advisor.core.metric import parse_drop
from advisor.core.noise import NOISE_SEEDS
from advisor.core.objectives import Limits
from advisor.core.pairs import DEFAULT_MAX_PAIRS, DEFAULT_TARGET, DEFAULT_TOP
from advisor.core.results import WORKLOADS, check_workload_kind
from advisor.core.stored import MAX_METRIC_DROP
from advisor.core.units import duration_flag, parse_duration, parse_size
from advisor.search.samplers import check_sampler
from advisor.study.options.option import Naming, build, naming, option, options_of

TRAIN_MODES = ("selective", "all")  # --train: the configurations that could reach the front, or every one
# --log-to: the experiment trackers a study logs its trials to (advisor.outputs.trackers), each
# with the package it needs: an optional extra of the same name (pip install 'advisor[mlflow]')
TRACKERS = {"mlflow": "mlflow", "tensorboard": "tensorboard", "wandb": "wandb"}
STORAGE_HELP = "Optuna storage URL (default $ADVISOR_STORAGE or sqlite:///advisor.db)"


def _drop(value: Any, name: str) -> tuple[float, bool]:
    """The drop as given: (amount, relative) parsed already, a number, or "0.01" / "2%"."""
    if isinstance(value, tuple):
        return value
    if not isinstance(value, str):
        return value, False
    try:
        return parse_drop(value)
    except ValueError as exc:
        raise StudyError(f"{name}{'' if name.endswith('=') else ' '}{value!r}: {exc}") from None


def _size(value: Any, name: str) -> int | None:
    return parse_size(value, name) if isinstance(value, str) else value


def _duration(value: Any, name: str) -> float | None:
    """A duration as given: seconds, or text such as "30m" / "1h30m"."""
    if not isinstance(value, str):
        return value
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise StudyError(f"{name}{'' if name.endswith('=') else ' '}{value!r}: {exc}") from None


def _fraction_env(text: str, variable: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise StudyError(f"${variable} is {text!r}, expected a fraction such as 0.05 (+-5%)") from None


def check_tolerance(value: float, name: str) -> float:
    """A timing tolerance (``name``: where it came from), or a StudyError: a fraction in (0, 1)."""
    if not 0 < value < 1:
        raise StudyError(f"{name} must be a fraction between 0 and 1 (0.05: +-5%), found {value}")
    return value


def _switch_env(text: str, variable: str) -> bool:
    value = text.strip().lower()
    if value not in ("0", "1", "yes", "no", "true", "false", "on", "off"):
        raise StudyError(f"${variable} is {value!r}, expected 1 (confirm) or 0 (do not)")
    return value in ("1", "yes", "true", "on")


def _ray_address_env(text: str, variable: str) -> str | None:
    return text.strip() or None  # RAY_ADDRESS="" : no cluster, a local Ray


MAX_SEED = 2**32 - 1  # the largest seed Optuna's samplers (and numpy's) take


def _seeds_env(text: str, variable: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise StudyError(f"${variable} is {text!r}, expected a whole number (1: no estimate)") from None


def _as_given(name: str, value: str) -> str:
    """The option with a value, as the caller wrote it: "--log-to mlflow" or "log_to='mlflow'"."""
    return f"{name}{value!r}" if name.endswith("=") else f"{name} {value}"


def read_trackers(value: Any, name: str) -> tuple[str, ...]:
    """--log-to as given (text such as "mlflow,wandb", the values of a repeated flag, or a
    list): each tracker as NAME or NAME:WHERE (where it logs: a tracking URI, a directory, a
    project), known and named once; a StudyError naming ``name`` otherwise."""
    items = [value] if isinstance(value, str) else value if isinstance(value, (list, tuple)) else None
    if items is None or not all(isinstance(item, str) for item in items):
        raise StudyError(f"{name}{'' if name.endswith('=') else ' '}{value!r}: expected tracker names "
                         f"({', '.join(TRACKERS)}), comma-separated or a list")
    found: dict[str, str] = {}
    for entry in (part.strip() for item in items for part in item.split(",")):
        tracker, colon, where = (s.strip() for s in entry.partition(":"))
        if not entry:
            continue
        if tracker.lower() not in TRACKERS:
            raise StudyError(f"{_as_given(name, entry)}: unknown tracker {tracker!r} (expected "
                             f"{', '.join(TRACKERS)}, each optionally followed by :WHERE)")
        if colon and not where:
            raise StudyError(f"{_as_given(name, entry)}: nothing after ':' (give where it logs, or the name alone)")
        if tracker.lower() in found:
            raise StudyError(f"{_as_given(name, tracker.lower())} is given twice")
        found[tracker.lower()] = f"{tracker.lower()}:{where}" if where else tracker.lower()
    return tuple(found.values())


def check_trackers_installed(entries: tuple[str, ...], name: str) -> None:
    """A StudyError for a tracker whose library is not installed (``name``: the option as
    the caller writes it)."""
    for entry in entries:
        tracker = entry.partition(":")[0]
        if importlib.util.find_spec(TRACKERS[tracker]) is None:
            raise StudyError(f"{_as_given(name, tracker)} needs the {TRACKERS[tracker]} package: "
                             f"pip install 'advisor[{tracker}]'")


def _trackers_env(text: str, variable: str) -> tuple[str, ...]:
    return read_trackers(text, f"${variable}")


@dataclass(frozen=True)
class ConfirmOptions:
    """How much to confirm: the ``top`` candidates, each until its sitting has the pairs
    Stein's rule asks for an interval within ``target`` (relative half-width), or it has
    ``max_pairs`` pairs over all its sittings."""

    top: int = DEFAULT_TOP
    max_pairs: int = DEFAULT_MAX_PAIRS
    target: float = DEFAULT_TARGET


def check_confirm_options(options: ConfirmOptions, name: Naming | None = None) -> ConfirmOptions:
    """Raise StudyError (exit status 2) for a bad confirmation option, named by ``name``
    (default: its flag)."""
    name = name or naming(TuneOptions, python=False)
    if options.max_pairs < 1:
        raise StudyError(f"{name('pairs')} must be at least 1, found {options.max_pairs}")
    if options.top < 1:
        raise StudyError(f"{name('confirm_top')} must be at least 1, found {options.top}")
    if not 0 < options.target < 1:
        raise StudyError(f"{name('confirm_target')} must be a fraction between 0 and 1 (0.03: +-3%), "
                         f"found {options.target}")
    return options


_NOT_RESUMED = ("trials", "storage", "study_name")  # the resume line says these its own way


@dataclass(frozen=True)
class TuneOptions:
    """The options of one study, in the order of ``advisor tune --help``; ``check()``
    refuses bad values before anything runs."""

    workload_path: str = option()  # the command's positional model, advisor.tune()'s model (or callables)
    workload: str = option(
        "train", flag="--workload", choices=WORKLOADS,
        help="train (default): time training steps, the metric after a fixed number of samples; "
             "inference: time forward passes of the trained model, no training")
    space: str | None = option(  # None: "default" for training, "inference" for inference
        None, flag="--space",
        help="preset name or YAML file (default: default, or inference with --workload inference)")
    trials: int = option(20, flag="--trials", parse=int,
                         help="the study's total number of measured trials (default 20)")
    storage: str | None = option(None, flag="--storage", help=STORAGE_HELP)
    study_name: str | None = option(None, flag="--study",
                                    help="study name (default: MODEL-SPACE); re-running resumes it")
    timeout: float | None = option(None, flag="--timeout", parse=float,
                                   help="wall-clock budget of the whole study, seconds")
    budget: float | None = option(
        None, flag="--budget", parse=parse_duration, read=_duration, metavar="DURATION",
        help="time for the whole study (e.g. 30m, 2h, 1h30m, or seconds): once the baseline is in, the "
             "confirmation is sized to at most a quarter of it (fewer candidates, then fewer pairs) and the "
             "search is planned to end early enough for the undecided candidates' seeds and the "
             "confirmation, which stop at the budget's end")
    trial_timeout: float | None = option(
        None, flag="--trial-timeout", parse=float,
        help="limit for one trial, seconds (default: 10x the baseline trial, at least 120)")
    timing_tolerance: float | None = option(
        None, flag="--timing-tolerance", parse=float, metavar="FRACTION", env="ADVISOR_TIMING_TOLERANCE",
        env_read=_fraction_env,
        help="time each configuration's steps until their median is known to +-this fraction (default: "
             "the baseline's own run-to-run spread, 1-10%%, or $ADVISOR_TIMING_TOLERANCE); 0.2 for a "
             "quicker, rougher search")
    max_metric_drop: float = option(  # how much worse the metric may get
        0.01, flag="--max-metric-drop", parse=parse_drop, read=_drop, into=("max_metric_drop", "max_drop_relative"),
        metavar="AMOUNT|PCT%", must_match=MAX_METRIC_DROP,
        help="feasible trials are at most this much worse than the baseline on the metric: an "
             "amount of it (default 0.01: 1 point of a fraction such as accuracy), or a percentage "
             "of the baseline's (2%%); 'worse' follows the metric's direction (model.py's METRIC)",
        aliases=("--max-accuracy-drop",))
    max_drop_relative: bool = option(False, must_match="max_drop_relative")  # ... a fraction of the baseline's ("1%")
    memory_cap: int | None = option(None, flag="--memory-cap", read=_size, must_match="memory_cap_bytes",
                                    help="feasible trials peak below this, e.g. 2GiB or 500MiB")
    max_latency_ms: float | None = option(
        None, flag="--max-latency-ms", parse=float, metavar="MS", must_match="max_latency_ms",
        help="inference only: feasible trials answer within this many milliseconds at their batch "
             "size, at the 99th percentile of single calls (p99), e.g. 10")
    train_samples: int | None = option(
        None, flag="--train-samples", parse=int,
        help="samples each trial trains on before evaluation (default: 5 epochs of the training set, "
             "fewer when the study's training runs would take over 40 min, or half of --budget)")
    sampler: str = option(
        "default", flag="--sampler",
        help="default: the baseline with one knob changed first (up to 8 trials), then TPE; "
             "or plain tpe, nsga2, random, gp (gp needs scipy: pip install 'advisor[gp]')")
    seed: int = option(0, flag="--seed", parse=int, help="seed of the sampler and of every trial (default 0)")
    ray_address: str | None = option(
        None, flag="--ray-address", env="RAY_ADDRESS", env_read=_ray_address_env,
        help="join this Ray cluster instead of starting a local one (default: $RAY_ADDRESS when set, "
             "as Ray's own tools read it)")
    skip_preflight: bool = option(
        False, flag="--skip-preflight",
        help="do not build the model in the driver first (for models too large for it)")
    pairs: int = option(
        DEFAULT_MAX_PAIRS, flag="--pairs", parse=int,
        help="paired confirmation: at most this many pairs per configuration, over all "
             f"its sittings (default {DEFAULT_MAX_PAIRS})")
    confirm_target: float = option(
        DEFAULT_TARGET, flag="--confirm-target", parse=float,
        help="pair a configuration until its 95%% interval is within this relative half-width: "
             "5 pairs, then as many as their spread asks for (Stein's two-stage rule) "
             f"(default {DEFAULT_TARGET}: +-{100 * DEFAULT_TARGET:.0f}%%)")
    confirm_top: int = option(
        DEFAULT_TOP, flag="--confirm-top", parse=int,
        help=f"confirm at most this many configurations of the front at once, the export picks first; "
             f"one that confirms lower and leaves the front frees its place (default {DEFAULT_TOP})")
    confirm: bool = option(  # paired confirmation of the front at the end
        True, flag="--confirm", negatable=True, env="ADVISOR_CONFIRM", env_read=_switch_env,
        help="confirm the front in pairs against the baseline at the end (default: on, or "
             "$ADVISOR_CONFIRM=0 for off); --no-confirm leaves the ratios unconfirmed (advisor confirm "
             "runs it later)")
    metric_seeds: int = option(
        NOISE_SEEDS, flag="--metric-seeds", parse=int, env="ADVISOR_METRIC_SEEDS", env_read=_seeds_env,
        older_env=("ADVISOR_ACCURACY_SEEDS",), aliases=("--accuracy-seeds",),
        help="train the baseline with this many seeds to measure the metric's noise "
             "(default 3, or $ADVISOR_METRIC_SEEDS; 1: no estimate)")
    train: str = option(  # two-stage evaluation; "all": every trial trains in full, as before
        "selective", flag="--train", choices=TRAIN_MODES, aliases=("--accuracy",),
        help="selective (default): probe every configuration's speed and memory, and train only "
             "those that could still reach the feasible front (two-stage evaluation); all: train "
             "every configuration in full, as one process per trial")
    ignore_doctor: bool = option(  # keep the options that failed `advisor doctor` on this machine
        False, flag="--ignore-doctor",
        help="keep the options that failed `advisor doctor` on this machine (by default they are "
             "dropped, each with the reason)")
    log_to: tuple[str, ...] = option(  # experiment trackers: advisor.outputs.trackers
        (), flag="--log-to", read=read_trackers, repeat=True, metavar="TRACKER[:WHERE]", env="ADVISOR_LOG_TO",
        env_read=_trackers_env,
        help="log each trial to an experiment tracker as it is stored (its knobs, figures, failure; the "
             "confirmation and the front at the end): mlflow, tensorboard or wandb, several comma-separated or "
             "repeated (default $ADVISOR_LOG_TO); WHERE: an MLflow tracking URI (default $MLFLOW_TRACKING_URI or "
             "MLflow's own), a TensorBoard log directory (default ./runs), a W&B [ENTITY/]PROJECT (default "
             "$WANDB_PROJECT or advisor). Each needs its package: pip install 'advisor[mlflow]' and so on")

    @classmethod
    def given(cls, workload_path: str, values: dict[str, Any], python: bool) -> TuneOptions:
        """The options from values as given (keyed by field), read as the caller wrote them."""
        return build(cls, values, naming(cls, python), workload_path=workload_path)

    @property
    def two_stage(self) -> bool:
        """Probe every configuration, train only those that could reach the front."""
        return self.train == "selective" and self.workload == "train"

    @property
    def confirm_options(self) -> ConfirmOptions:
        return ConfirmOptions(self.confirm_top, self.pairs, self.confirm_target)

    @property
    def limits(self) -> Limits:
        """What makes a trial feasible in this study."""
        return Limits(self.max_metric_drop, self.memory_cap, self.max_drop_relative, self.max_latency_ms)

    @property
    def drop_text(self) -> str:
        """The limit as the user wrote it: '0.01' or '1%'."""
        return f"{100 * self.max_metric_drop:g}%" if self.max_drop_relative else f"{self.max_metric_drop:g}"

    def resume_flags(self) -> list[str]:
        """The command line's flags that set these options where they differ from the
        defaults, as typed ('--train-samples', '256'): what `advisor tune` must be given again
        to resume the study (a must-match option, the trials' settings, the space) or to run
        it as it ran. Not --trials (the resume line's own), nor where the study is stored."""
        out: list[str] = []
        found = options_of(TuneOptions)
        for f in dataclasses.fields(self):
            o, value = found.get(f.name), getattr(self, f.name)
            relative = f.name == "max_metric_drop" and self.max_drop_relative  # '1%' is not the default 0.01
            if o is None or o.flag is None or (value == f.default and not relative) or f.name in _NOT_RESUMED:
                continue
            if f.name == "max_metric_drop":
                out += [o.flag, self.drop_text]
            elif f.name == "log_to":
                out += [o.flag, ",".join(value)]
            elif f.name == "budget":
                out += [o.flag, duration_flag(value)]
            elif isinstance(value, bool):
                out.append(o.flag if value else f"--no-{o.flag.removeprefix('--')}")
            else:
                out += [o.flag, f"{value:g}" if isinstance(value, float) else str(value)]
        return out

    @property
    def space_name(self) -> str:
        """The space asked for, or the workload's default preset."""
        return self.space or ("inference" if self.workload == "inference" else "default")

    def check(self, python: bool = False) -> TuneOptions:
        """Raise StudyError for the first bad option, named by its flag ("--trials") or, for
        ``python``, by advisor.tune()'s keyword ("trials="); return the options when all are good."""
        name = naming(TuneOptions, python)
        for field, o in options_of(TuneOptions).items():  # advisor.tune(trials="4"): said, not a TypeError
            value = getattr(self, field)
            if o.parse in (int, float) and value is not None and (
                    isinstance(value, bool) or not isinstance(value, (int, float) if o.parse is float else int)):
                kind = "a whole number" if o.parse is int else "a number"
                raise StudyError(f"{name(field)} must be {kind}, found {type(value).__name__} {value!r}")
        if self.trials < 1:
            raise StudyError(f"{name('trials')} must be at least 1, found {self.trials}")
        for field, value in (("timeout", self.timeout), ("budget", self.budget), ("trial_timeout", self.trial_timeout)):
            if value is not None and not value > 0:
                raise StudyError(f"{name(field)} must be a positive number of seconds, found {value}")
        if self.timing_tolerance is not None:
            check_tolerance(self.timing_tolerance, name("timing_tolerance"))
        drop = name("max_metric_drop")
        if not 0 <= self.max_metric_drop < math.inf:
            raise StudyError(f"{drop} must be >= 0, found {self.drop_text}")
        if self.max_drop_relative and self.max_metric_drop > 1:
            raise StudyError(f"{drop} must be at most 100% of the baseline's metric, found {self.drop_text}")
        if self.memory_cap is not None and not self.memory_cap > 0:
            raise StudyError(f"{name('memory_cap')} must be positive, found {self.memory_cap}")
        check_workload_kind(self.workload, name("workload"))
        if self.max_latency_ms is not None:
            if not 0 < self.max_latency_ms < math.inf:
                raise StudyError(f"{name('max_latency_ms')} must be a positive number of milliseconds, "
                                 f"found {self.max_latency_ms}")
            if self.workload != "inference":
                raise StudyError(f"{name('max_latency_ms')} applies to inference studies only (a training study "
                                 f"times training steps, not requests): add {name('workload')} inference, or leave "
                                 f"{name('max_latency_ms')} out")
        check_sampler(self.sampler, name("sampler"))
        if self.train_samples is not None and self.train_samples < 1:
            raise StudyError(f"{name('train_samples')} must be at least 1, found {self.train_samples}")
        if self.train_samples is not None and self.workload == "inference":  # accepted, it meant nothing, and a
            # resume with it was refused for "train_samples 1 then, 64 now", a value the user never gave
            raise StudyError(f"{name('train_samples')} applies to training studies: an inference study trains "
                             "nothing (each trial times its forward passes and evaluates, in one run); leave "
                             f"{name('train_samples')} out")
        check_confirm_options(self.confirm_options, name)
        if self.metric_seeds < 1:
            raise StudyError(f"{name('metric_seeds')} must be at least 1 (1: no noise estimate), "
                             f"found {self.metric_seeds}")
        highest = MAX_SEED - (self.metric_seeds - 1)  # the baseline's noise seeds follow it
        if not 0 <= self.seed <= highest:
            raise StudyError(f"{name('seed')} must be between 0 and {highest} (the samplers take seeds below 2**32, "
                             f"and the baseline's metric seeds count up from it), found {self.seed}")
        if self.train not in TRAIN_MODES:
            raise StudyError(f"{name('train')} must be one of {', '.join(TRAIN_MODES)}, found {self.train!r}")
        if self.train == "all" and self.workload == "inference":  # it was accepted and meant nothing
            raise StudyError(f"{name('train')} all applies to training studies: an inference study trains "
                             "nothing (each trial times its forward passes and evaluates, in one run); leave "
                             f"{name('train')} out")
        check_trackers_installed(read_trackers(self.log_to, name("log_to")), name("log_to"))
        if self.skip_preflight and self.train_samples is None and self.workload == "train":
            raise StudyError(f"{name('train_samples')} is required with {name('skip_preflight')} "
                             "(how many samples each trial trains on)")
        return self
