"""The tuning study: Optuna multi-objective study driven by trials run on Ray.

Only this driver touches Optuna storage; workers return plain results. The baseline
(the user's BASELINE on plain fp32) is trial 0 and runs alone first: its accuracy anchors
the accuracy-drop constraint and its duration the default per-trial timeout.
"""

from __future__ import annotations

import math
import signal
import threading
import warnings
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from advisor import storage as st
from advisor.config import TrialConfig
from advisor.errors import StudyError, TrialFailed, WorkloadError
from advisor.oom import KnownOom
from advisor.seeding import seed_count, seed_configs
from advisor.techniques import conflicts, refusal
from advisor.trial import TrialResult, TrialSettings, make_payload

if TYPE_CHECKING:
    import optuna

    from advisor.scheduler import RayExecutor, Running
    from advisor.space import SearchSpace

BASELINE_TIMEOUT_S = 1800.0


@dataclass
class TuneOptions:
    workload_path: str
    space: str | None = None  # None: "default" for training, "inference" for inference
    workload: str = "train"
    storage: str | None = None
    study_name: str | None = None
    trials: int = 20
    timeout: float | None = None
    trial_timeout: float | None = None
    max_accuracy_drop: float = 0.01
    memory_cap: int | None = None
    sampler: str = "default"
    seed: int = 0
    train_samples: int | None = None
    ray_address: str | None = None
    skip_preflight: bool = False


def make_sampler(name: str, seed: int) -> optuna.samplers.BaseSampler:
    """The sampler for a study.

    TPE is the default: the space is small and categorical and a study has tens of
    trials, where TPE's multi-objective mode is sample-efficient, handles conditional
    (define-by-run) knobs natively, and with ``constant_liar`` spreads trials that run in
    parallel. NSGA-II needs populations of ~50 per generation to work; random search is the
    honest reference. ``constraints`` set with trial.set_constraint are honoured by each.
    """
    import optuna

    if name in ("default", "tpe"):  # "default" adds the seed trials (advisor.seeding) before TPE
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # group=True
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=8, multivariate=True,
                                          group=True, constant_liar=True)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=16)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "gp":
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=8)
    raise StudyError(f"--sampler {name!r} is unknown (expected {', '.join(SAMPLERS)})")


SAMPLERS = ("default", "tpe", "nsga2", "random", "gp")


class Tuner:
    """Prepares and runs one study. Use ``prepare()`` then ``run()``."""

    def __init__(self, options: TuneOptions, on_event: Callable[[str, dict[str, Any]], None] | None = None,
                 executor: Any = None) -> None:
        """``executor`` runs the trials: Ray (the default, started in ``start_ray``) or
        anything with the same interface (start, submit, wait, cancel, shutdown, device,
        slots, resources, startup_s); benchmarks/replay.py answers from a recorded grid."""
        self.o = options
        self.emit = on_event or (lambda kind, data: None)
        self.executor: RayExecutor | None = executor
        self.running: dict[int, tuple[Running, optuna.Trial, TrialConfig]] = {}
        self.stop_reason: str | None = None
        self.baseline_accuracy: float | None = None

    # ---- preparation: everything that can fail on bad input happens before Ray starts --
    def prepare(self) -> None:
        from advisor.hardware import detect, fingerprint
        from advisor.space import filter_space, load_space
        from advisor.workload import load_workload, preflight

        o = self.o
        if o.trials < 1:
            raise StudyError(f"--trials must be at least 1, found {o.trials}")
        for flag, value in (("--timeout", o.timeout), ("--trial-timeout", o.trial_timeout)):
            if value is not None and not value > 0:
                raise StudyError(f"{flag} must be a positive number of seconds, found {value}")
        if not 0 <= o.max_accuracy_drop < math.inf:
            raise StudyError(f"--max-accuracy-drop must be >= 0, found {o.max_accuracy_drop}")
        if o.workload not in ("train", "inference"):
            raise StudyError(f"--workload must be train or inference, found {o.workload!r}")
        self.workload = load_workload(o.workload_path)
        self.facts = {"workload": o.workload} | ({} if o.skip_preflight else preflight(self.workload))
        space = load_space(o.space or ("inference" if o.workload == "inference" else "default"))
        self.hardware = detect()
        self.space: SearchSpace = filter_space(space, self.hardware, self.facts)
        self.baseline = TrialConfig.from_dict(self.workload.baseline, where=f"{self.workload.path}: BASELINE")
        reason = refusal(self.baseline, o.workload)
        if reason:
            raise WorkloadError(f"{self.workload.path}: BASELINE: {reason}")
        self.study_name = st.check_study_name(o.study_name or f"{self.workload.name}-{space.name}")
        make_sampler(o.sampler, o.seed)  # an unknown sampler is refused before storage is touched
        if o.train_samples is not None and o.train_samples < 1:
            raise StudyError(f"--train-samples must be at least 1, found {o.train_samples}")
        train_samples = o.train_samples or 5 * self.facts.get("train_size", 0)
        if o.workload == "inference":
            train_samples = o.train_samples or 1  # not used: inference trials do not train
        if train_samples < 1:
            raise StudyError("--train-samples is required with --skip-preflight (how many samples each trial trains on)")
        self.settings = TrialSettings(train_samples=train_samples, seed=o.seed, device=self.hardware.device,
                                      workload=o.workload)
        self.fingerprint = fingerprint(self.hardware)
        self.url = st.storage_url(o.storage)
        st.check_storage(self.url)  # checked now; opened (and a SQLite file created) in run()

    # ---- the study ------------------------------------------------------------------
    def open_study(self) -> optuna.Study:
        import optuna

        attrs = {
            "workload_path": str(self.workload.path),
            "workload_sha256": self.workload.sha256,
            "workload": self.o.workload,
            "space_name": self.space.name,
            "space": self.space.to_dict(),
            "dropped_options": [[d.knob, d.value, d.reason] for d in self.space.dropped],
            "settings": self.settings.to_dict(),
            "hardware": self.fingerprint,
            "max_accuracy_drop": self.o.max_accuracy_drop,
            "memory_cap_bytes": self.o.memory_cap,
            "objectives": list(st.OBJECTIVES),
        }
        exists = self.study_name in st.study_names(self.storage)
        study = optuna.create_study(storage=self.storage, study_name=self.study_name, load_if_exists=True,
                                    directions=list(st.DIRECTIONS), sampler=make_sampler(self.o.sampler, self.o.seed))
        if exists:
            self._check_resumable(study, attrs)
        else:
            for key, value in attrs.items():
                study.set_user_attr(key, value)
        self._fail_stale(study)
        return study

    def _check_resumable(self, study: optuna.Study, attrs: dict[str, Any]) -> None:
        old = dict(study.user_attrs)
        if isinstance(old.get("settings"), dict):  # studies from older versions lack newer fields
            old["settings"] = {**TrialSettings(train_samples=0).to_dict(), **old["settings"]}
        diffs = [k for k in ("workload_sha256", "space", "settings", "max_accuracy_drop", "memory_cap_bytes")
                 if k in old and old[k] != attrs[k]]
        if diffs:
            raise StudyError(
                f"study {self.study_name!r} in {self.url} was run with a different {', '.join(diffs)}; "
                "its trials would not be comparable. Use --study NEW_NAME for a new study "
                "(or run the original setup again to resume it)")
        if old.get("hardware") != attrs["hardware"]:
            self.emit("note", {"text": "this machine's hardware fingerprint differs from the one the study "
                                       "started on; new trials are measured here"})

    def _fail_stale(self, study: optuna.Study) -> None:
        """RUNNING trials left by a driver that was killed are marked failed ('interrupted')."""
        import optuna

        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            study._storage.set_trial_user_attr(t._trial_id, "failure_class", "interrupted")
            study._storage.set_trial_user_attr(t._trial_id, "failure_message",
                                               "the driver stopped while this trial ran (marked failed on resume)")
            study.tell(t.number, state=optuna.trial.TrialState.FAIL)
            self.emit("note", {"text": f"trial {t.number} was left running by an earlier run: marked failed"})

    # ---- running ---------------------------------------------------------------------
    def start_ray(self) -> None:
        """Start (or join) Ray; ``run()`` does it when not done yet. Call it in the main
        thread when the study itself runs in another one (Ray's init needs real stdio)."""
        from advisor.scheduler import RayExecutor

        if self.executor is None:
            self.executor = RayExecutor(self.hardware.device, self.o.ray_address)
        if not getattr(self.executor, "started", False):
            self.executor.start()

    def run(self) -> optuna.Study:
        # Ray first: if no node can run a trial, say so before any study is written.
        self.start_ray()
        assert self.executor is not None
        try:
            self.storage = st.open_storage(self.url)
            study = self.open_study()
        except BaseException:
            self.executor.shutdown()
            raise
        self.deadline = math.inf
        self.emit("ray", {"startup_s": self.executor.startup_s, "slots": self.executor.slots,
                          "resources": self.executor.resources})
        # Ctrl-C / SIGTERM stop the study gracefully; in a background thread (the live
        # explorer) the caller stops it with stop() instead.
        main_thread = threading.current_thread() is threading.main_thread()
        previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)} if main_thread else {}
        for s in previous:
            signal.signal(s, self._on_signal)
        try:
            if self.o.timeout:  # the budget counts from here, after Ray has started
                self.deadline = time.monotonic() + self.o.timeout
            base = self._ensure_baseline(study)
            if base is not None and self.stop_reason is None:
                self._search(study, base)
        finally:
            self._cancel_all(study, self.stop_reason or "the study stopped")
            for s, handler in previous.items():
                signal.signal(s, handler)
            self.executor.shutdown()
        return study

    def stop(self, reason: str) -> None:
        """Ask a running study to stop: no new trials; running ones are cancelled and
        recorded (not counted), and ``run()`` returns. Safe to call from another thread."""
        if self.stop_reason is None:
            self.stop_reason = reason
            self.emit("note", {"text": f"stopping ({reason}): cancelling running trials"})

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.stop_reason is not None:  # a second Ctrl-C: stop at once
            raise KeyboardInterrupt
        self.stop_reason = "interrupted by " + signal.Signals(signum).name
        self.emit("note", {"text": f"{signal.Signals(signum).name}: stopping, cancelling running trials "
                                   "(press Ctrl-C again to abort at once)"})

    def _ensure_baseline(self, study: optuna.Study) -> optuna.trial.FrozenTrial | None:
        base = st.baseline_trial(study)
        if base is not None:
            self.baseline_accuracy = base.user_attrs["accuracy"]
            return base
        study.enqueue_trial(self.space.enqueue_params(self.baseline), user_attrs={"baseline": True})
        trial = study.ask()
        config = self.space.sample(trial, base=self.baseline)
        timeout = self.o.trial_timeout or BASELINE_TIMEOUT_S
        self._submit(trial, config)
        while self.running and self.stop_reason is None:
            self._collect(study, timeout)
        base = st.baseline_trial(study)
        if base is None and self.stop_reason is None:
            failed = study.trials[-1].user_attrs
            message = (f"the baseline trial ({self.baseline.to_dict()}) failed "
                       f"[{failed.get('failure_class')}]: {failed.get('failure_message')}")
            if self.o.skip_preflight and failed.get("failure_class") == "error":
                raise WorkloadError(f"{self.workload.path}: {message} (preflight was skipped; this is "
                                    "most likely a model.py contract problem)")
            raise TrialFailed(message)
        return base

    def _search(self, study: optuna.Study, base: optuna.trial.FrozenTrial) -> None:
        import optuna

        wall = base.user_attrs.get("wall_s", 60.0)
        self.trial_timeout = self.o.trial_timeout or max(120.0, 10.0 * wall)
        self.emit("timeout", {"trial_timeout_s": self.trial_timeout})
        trials = study.get_trials(deepcopy=False)
        # Keys from the stored configs with today's defaults filled in (older studies have fewer knobs).
        seen = {TrialConfig.from_dict(t.user_attrs["config"]).key(): t for t in trials
                if (st.measured(t) or t.user_attrs.get("skipped")) and "config" in t.user_attrs}
        done = sum(1 for t in trials if st.measured(t))
        if self.o.sampler == "default":  # first, the baseline with one knob changed (advisor.seeding)
            for config in seed_configs(self.space, self.baseline, seed_count(self.o.trials), self.o.workload):
                if config.key() not in seen:  # sampled with the seed as base: nothing else changes
                    study.enqueue_trial(self.space.enqueue_params(config), skip_if_exists=True,
                                        user_attrs={"seed_config": config.to_dict()})
        # then combinations of the seeds that paid off (advisor.combine), once, when they are in
        self.combine_due = self.o.sampler == "default" and not study.user_attrs.get("combined")
        self.known_oom = KnownOom()
        self.known_oom.add_trials(trials)
        space_size, dups_in_row = self.space.size(), 0
        pending: tuple[optuna.Trial, TrialConfig] | None = None  # sampled, waiting for devices
        while self.stop_reason is None:
            while (len(self.running) < self.executor.slots and done + len(self.running) < self.o.trials
                   and time.monotonic() < self.deadline and len(seen) < space_size):
                if pending is None:
                    if self.combine_due and not study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
                        if self.running:
                            break  # every seed's result first
                        self._enqueue_combinations(study, seen)
                    trial = study.ask()
                    seed = trial.user_attrs.get("seed_config")
                    config = self.space.sample(trial, base=TrialConfig.from_dict(seed) if seed else None)
                    if config.key() in seen:
                        self._tell_duplicate(study, trial, seen[config.key()])
                        dups_in_row += 1
                        if dups_in_row >= 50:
                            self.stop_reason = "the sampler proposed only already-measured configurations 50 times in a row"
                            break
                        continue
                    dups_in_row = 0
                    conflict = conflicts(config)
                    if conflict:  # cannot work: recorded as skipped, costs no trial
                        seen[config.key()] = self._skip(study, trial, config, conflict)
                        continue
                    oom = self.known_oom.reason(config)
                    if oom:  # would run out of memory like an earlier trial: skipped, costs no trial
                        seen[config.key()] = self._skip(study, trial, config, oom, "oom")
                        continue
                    pending = (trial, config)
                trial, config = pending
                if not self._fits(config):
                    break  # wait until enough GPUs are free for this trial
                pending = None
                seen[config.key()] = trial  # placeholder until it finishes
                self._submit(trial, config)
            if not self.running and pending is not None and self.stop_reason is None and not self._fits(pending[1]):
                self._skip(study, *pending, f"devices={pending[1].devices} is more than this cluster's "
                                            f"{self.executor.slots} GPU slots")
                pending = None
                continue
            if not self.running:
                if len(seen) >= space_size and done < self.o.trials:
                    self.emit("note", {"text": f"every configuration of the space ({space_size}) has been measured"})
                break
            if time.monotonic() >= self.deadline:
                self.stop_reason = "the study's --timeout was reached"
                break
            for trial in self._collect(study, self.trial_timeout):
                config = TrialConfig.from_dict(trial.user_attrs["config"])
                if st.measured(trial):
                    seen[config.key()] = trial
                    done += 1
                else:  # lost with its node or cancelled: the configuration may run again
                    seen.pop(config.key(), None)
                if trial.user_attrs.get("failure_class") == "oom":
                    self.known_oom.add(trial.number, config)

    def _fits(self, config: TrialConfig) -> bool:
        """Whether the trial can start now: a free node (CPU), or ``devices`` free GPUs."""
        if self.executor.device != "cuda":
            return len(self.running) < self.executor.slots
        in_use = sum(c.devices for _, _, c in self.running.values())
        return in_use + config.devices <= self.executor.slots

    def _skip(self, study: optuna.Study, trial: optuna.Trial, config: TrialConfig, reason: str,
              failure_class: str = "unsupported") -> Any:
        """Record a configuration that is not run as failed and skipped (not counted)."""
        import optuna

        for key, value in (("config", config.to_dict()), ("config_key", config.key()), ("skipped", True),
                           ("failure_class", failure_class), ("failure_message", reason)):
            trial.set_user_attr(key, value)
        frozen = study.tell(trial, state=optuna.trial.TrialState.FAIL)
        self.emit("skipped", {"number": trial.number, "config": config.to_dict(), "reason": reason})
        return frozen

    def _submit(self, trial: optuna.Trial, config: TrialConfig) -> None:
        trial.set_user_attr("config", config.to_dict())
        trial.set_user_attr("config_key", config.key())
        running = self.executor.submit(trial.number, make_payload(self.workload, config, self.settings))
        self.running[trial.number] = (running, trial, config)
        self.emit("submitted", {"number": trial.number, "config": config.to_dict()})

    def _collect(self, study: optuna.Study, timeout: float) -> list[optuna.trial.FrozenTrial]:
        """Wait briefly for results; record finished and timed-out trials."""
        finished = []
        runs = [r for r, _, _ in self.running.values()]
        for running, result in self.executor.wait(runs, timeout=0.5):
            finished.append(self._record(study, running.number, result, time.monotonic() - running.submitted))
        now = time.monotonic()
        for number, (running, _, _) in list(self.running.items()):
            if now - running.submitted > timeout:
                self.executor.cancel(running)
                result = TrialResult.failed("timeout", f"the trial ran longer than the trial timeout ({timeout:.0f} s)")
                finished.append(self._record(study, number, result, now - running.submitted))
        return finished

    def _record(self, study: optuna.Study, number: int, result: TrialResult, wall: float) -> optuna.trial.FrozenTrial:
        _, trial, config = self.running.pop(number)
        if result.ok and self.baseline_accuracy is None:  # this is the baseline
            self.baseline_accuracy = result.accuracy
        frozen = st.tell_result(study, trial, result, wall, self.baseline_accuracy, self.o.max_accuracy_drop,
                                self.o.memory_cap)
        self.emit("finished", {"number": number, "config": config.to_dict(), "result": result, "wall_s": wall,
                               "trial": frozen})
        return frozen

    def _enqueue_combinations(self, study: optuna.Study, seen: dict[str, Any]) -> None:
        """Queue the combinations of one-knob changes that paid off (advisor.combine)."""
        import optuna

        from advisor.combine import combination_configs, combination_count

        self.combine_due = False
        study.set_user_attr("combined", True)
        base = st.baseline_trial(study)
        if base is None:
            return

        def figures(t: optuna.trial.FrozenTrial) -> tuple[float, float, float] | None:
            return tuple(t.values) if t.state == optuna.trial.TrialState.COMPLETE else None  # type: ignore[return-value]

        measured = [(TrialConfig.from_dict(t.user_attrs["config"]), figures(t)) for t in study.get_trials(deepcopy=False)
                    if st.measured(t) and "config" in t.user_attrs and not t.user_attrs.get("baseline")]

        def allowed(config: TrialConfig) -> bool:
            return (config.key() not in seen and refusal(config, self.o.workload) is None
                    and conflicts(config) is None and self.known_oom.reason(config) is None)

        chosen = combination_configs(self.baseline, figures(base), measured, self.o.max_accuracy_drop,  # type: ignore[arg-type]
                                     self.o.memory_cap, combination_count(self.o.trials), allowed)
        for config in chosen:
            study.enqueue_trial(self.space.enqueue_params(config), skip_if_exists=True,
                                user_attrs={"seed_config": config.to_dict(), "combination": True})
        if chosen:
            self.emit("note", {"text": f"next: {len(chosen)} combination(s) of the one-knob changes that paid off"})

    def _tell_duplicate(self, study: optuna.Study, trial: optuna.Trial, earlier: Any) -> None:
        """A configuration already measured: answer from the earlier trial, run nothing."""
        import optuna

        trial.set_user_attr("duplicate_of", earlier.number)
        if isinstance(earlier, optuna.Trial) or earlier.state.name != "COMPLETE":
            study.tell(trial, state=optuna.trial.TrialState.FAIL)  # still running, or it failed
        else:
            for key, value in earlier.constraints.items():
                trial.set_constraint(key, value)
            study.tell(trial, list(earlier.values))
        self.emit("duplicate", {"number": trial.number, "of": earlier.number})

    def _cancel_all(self, study: optuna.Study, reason: str) -> None:
        """Cancel what still runs and record it, so storage holds no RUNNING trial."""
        import optuna

        for number, (running, trial, _) in list(self.running.items()):
            self.executor.cancel(running)
            self.running.pop(number)
            trial.set_user_attr("failure_class", "cancelled")
            trial.set_user_attr("failure_message", f"cancelled: {reason}")
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            self.emit("cancelled", {"number": number})

