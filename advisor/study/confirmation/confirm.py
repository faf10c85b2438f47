"""Paired confirmation: the configurations a user would pick, measured again in pairs
against the baseline, until the ratio's 95% interval is tight enough.

Read ``Confirmer.run`` top to bottom: choose the candidates (the feasible front, the
export picks first, at most ``top``), take up what earlier confirmations of the same
study stored, then run rounds (``advisor.study.confirmation.pairing``): the baseline, each unfinished
candidate, the baseline again, so every candidate gets one pair per round, measured over
the same stretch of time. Each pair is stored as soon as its round ends (a study
attribute per trial: Optuna cannot change a finished trial), so an interrupted
confirmation resumes without losing or repeating a pair. When the rounds are done, the
front is recomputed on the confirmed ratios; a configuration that joined it is confirmed
too (up to ``top`` on the front at once: a candidate that confirmed lower and left the front
frees its place).
"""

from __future__ import annotations

from typing import Any

from advisor.core.errors import StudyError, TrialFailed
from advisor.core.events import Listener, Note, Paired, ignore
from advisor.core.noise import SentinelJudge, reading_of
from advisor.core.pairs import MIN_PAIRS, Confirmation, beaten, settled
from advisor.core.picks import PICKS, pick
from advisor.core.results import TrialSettings
from advisor.core.stop import Stop
from advisor.core.stored import StoredStudy, TrialRecord, read_study
from advisor.core.study_attrs import StudyAttrs
from advisor.core.two_stage import dominates_beyond_noise
from advisor.core.units import plural
from advisor.runner.executor import Executor
from advisor.study.confirmation.pairing import Candidate, Rounds
from advisor.study.options.tune_options import ConfirmOptions, check_confirm_options


def near_front(study: StoredStudy) -> list[TrialRecord]:
    """The feasible front, then the completed feasible trials that only an unconfirmed
    reading keeps off it: no trial of the front beats them beyond the probe noise on both
    throughput and memory (``dominates_beyond_noise``, two-stage evaluation's rule) at a
    metric they do not beat beyond its noise. Paired, such a trial may well join the front:
    a single probe on this 2-core machine moves 10-30%, and a study (benchmarks/trust.py,
    study B) read bf16 alone at 1.02x beside a combination at 1.06x with less memory, never
    confirmed bf16, and picked the combination (confirmed 1.03x) where the same command's
    other run confirmed bf16 at 1.38x. A trial confirmed in pairs is off the front on its
    confirmed figures: it is not brought back."""
    front = study.front()
    on_front = {r.number for r in front}
    margins, eps = study.probe_margins, study.epsilon
    shown = {r.number: study.relative_figures(r) for r in front}
    near = []
    for r in study.records:
        if r.number in on_front or r.baseline or r.state != "complete" or not r.feasible or r.config is None:
            continue
        if study.versus_baseline(r).confirmed:
            continue
        f = study.relative_figures(r)
        if not any(dominates_beyond_noise(shown[s.number][:2], f[:2], margins)
                   and shown[s.number].score >= f.score - eps for s in front):
            near.append(r)
    return front + near


def candidates(study: StoredStudy, top: int) -> list[TrialRecord]:
    """The configurations that could still be picked: the export picks first, then the
    rest of the feasible front, and the trials off it within the noise (``near_front``),
    that are within the noise of a pick on that pick's own
    objective (throughput within the probe noise of the fastest, memory within it of the
    smallest, the metric within its noise of the best one), fastest first; never the
    baseline itself; at most ``top``. The rest cannot change a pick, so it
    is not confirmed (issue 31: confirmation sized to the decision)."""
    front = [r for r in near_front(study) if not r.baseline and r.config is not None]
    if not front:
        return []
    chosen: dict[int, TrialRecord] = {}
    picked = {how: pick(study, how) for how in PICKS}
    for r in picked.values():
        if not r.baseline:
            chosen.setdefault(r.number, r)
    figures = {r.number: study.relative_figures(r) for r in [*front, *picked.values()]}
    noise = study.probe_margins
    fastest, smallest, best = (figures[picked[h].number] for h in ("fastest", "smallest", "best-metric"))

    def could_be_picked(r: TrialRecord) -> bool:
        f = figures[r.number]
        return (f.throughput * (1 + noise.throughput) >= fastest.throughput
                or f.peak_memory_bytes <= smallest.peak_memory_bytes * (1 + noise.memory)
                or f.score >= best.score - study.epsilon)

    for r in sorted(front, key=lambda r: -figures[r.number].throughput):
        if could_be_picked(r):
            chosen.setdefault(r.number, r)
    return list(chosen.values())[:top]


class Confirmer:
    """Confirms a stored study's candidates in pairs (``advisor.study.confirmation.pairing.Rounds``).

    Args:
        study: the Optuna study (confirmations are stored as its attributes).
        workload: the loaded model.py (anything ``TrialPayload.of`` takes).
        settings: the study's trial settings.
        executor: runs the probes, one at a time (each alone on its devices).
        options: how much to confirm.
        trial_timeout: the limit for one probe, seconds.
        stop: why to stop (Ctrl-C, the study's --budget); checked while probes run. None: never.
        on_event: receives ``Paired`` and ``Note`` events.
        new_sittings: whether a candidate confirmed in an earlier run gets a sitting of pairs
            now (``advisor confirm``: what it is run for); False for ``advisor tune``, whose
            same command again resumes the study and must not re-measure what it settled (a
            review's second run of a finished command replaced clean figures with a busy
            machine's).
    """

    def __init__(self, study: Any, workload: Any, settings: TrialSettings, executor: Executor,
                 options: ConfirmOptions = ConfirmOptions(), trial_timeout: float = 600.0,
                 stop: Stop | None = None, on_event: Listener = ignore, new_sittings: bool = True) -> None:
        self.study, self.workload, self.settings, self.executor = study, workload, settings, executor
        self.options, self.trial_timeout, self.emit = options, trial_timeout, on_event
        self.new_sittings = new_sittings
        self.stop = stop if stop is not None else Stop()
        self.stored: StoredStudy | None = None

    def run(self) -> dict[int, Confirmation]:
        """Confirm (or extend the confirmation of) the candidates; returns them by trial.

        Raises:
            TrialFailed: the baseline itself failed to run (nothing more can be paired).
        """
        stored = self.stored = read_study(self.study)
        base = stored.baseline
        if base is None or base.config is None:
            raise TrialFailed(f"study {stored.name!r} has no completed baseline to confirm against")
        judge = SentinelJudge(x for x in (reading_of(r.get("telemetry")) for r in stored.records) if x is not None)
        earlier = [p.sitting for c in stored.confirmations.values() for p in c.pairs]
        # pairs measured now are a sitting of their own; the same `advisor tune` again goes on with its
        # own (a review's interrupted confirmation, resumed, pooled one more pair as a second sitting)
        sitting = (max(earlier) + (1 if self.new_sittings else 0)) if earlier else 0
        rounds = Rounds(self.executor, self.workload, self.settings, judge, self.options.target,
                        self.options.max_pairs, self.trial_timeout, self.stop, self.emit, self._store, self._stop_early,
                        sitting)
        chosen: dict[int, Candidate] = {}
        kept: list[int] = []  # confirmed in an earlier run, left as they are (new_sittings False)
        off_front: set[int] = set()  # chosen while off the front within the noise (``near_front``)
        said_kept = False
        rounds_run = 0
        while not self.stop.halted:
            # the cap counts the chosen that are still on the front: one that confirmed lower and
            # left it frees its place for the trial that pushed it off (README command 1: trial 15
            # confirmed at 1.81x, trial 7's unconfirmed 1.84x then dominated it, and the picks
            # fell back to a confirmed 1.42x while 7 stayed unconfirmed)
            near = {r.number for r in near_front(stored)}  # the front, and what only the noise keeps off it
            # one chosen off the front keeps its place once confirmed, wherever it ended: freed, it let
            # README command 1 confirm 10 configurations (58 s of pairs) with --confirm-top 6
            held = sum(1 for n in chosen if n in near or n in off_front)
            new = [r for r in candidates(stored, self.options.top) if r.number not in chosen]
            new = new[: max(0, self.options.top - held)]
            on_front = {r.number for r in stored.front()}  # once, not per candidate (the front is O(n^2))
            off = [r.number for r in new if r.number not in on_front]
            off_front.update(off)
            if off:
                self.emit(Note(f"trial{'s' if len(off) > 1 else ''} {', '.join(map(str, off))} "
                               f"{'are' if len(off) > 1 else 'is'} off the front by less than the probe noise "
                               f"({stored.probe_margins.text()}): confirmed too, as pairs may bring "
                               f"{'them' if len(off) > 1 else 'it'} onto it"))
            for r in new:
                c = stored.confirmations.get(r.number) or Confirmation(r.number)
                if not self.new_sittings and c.pairs and c.done:
                    kept.append(r.number)
                else:
                    c.settle(self.options.target, self.options.max_pairs, sitting)  # a new sitting, or a raised cap
                chosen[r.number] = Candidate(f"trial {r.number}", r.config, c)  # type: ignore[arg-type]
            due = [c for c in chosen.values() if not c.confirmation.done]
            cap = self.options.max_pairs
            if kept and not said_kept:
                said_kept = True
                self.emit(Note(f"confirmed in an earlier run, kept as measured then: trial"
                               f"{'s' if len(kept) > 1 else ''} {', '.join(map(str, kept))} (`advisor confirm "
                               f"--study {stored.name}` adds a sitting of pairs, pooled with those)"))
            if not due:
                full = sorted(n for n, c in chosen.items() if len(c.confirmation.counted) >= cap and n not in kept)
                if full and not rounds_run:  # `advisor confirm --pairs 3` on candidates that have 5 pairs
                    who = f"trials {', '.join(map(str, full))} have" if len(full) > 1 else f"trial {full[0]} has"
                    self.emit(Note(f"no pairs to add: {who} {cap} or more pairs "
                                   f"already, and --pairs {cap} counts the pairs of every sitting (raise it to add "
                                   "a sitting's pairs)"))
                break
            stored_pairs = max(len(c.confirmation.counted) for c in due)
            if stored_pairs:  # a later sitting: the cap counts the stored pairs too
                room = max(cap - len(c.confirmation.counted) for c in due)
                plan = (f"up to {plural(room, 'more pair')} each: --pairs {cap} counts the pairs of every sitting, "
                        f"and these have up to {stored_pairs} stored")
            else:
                plan = (f"{MIN_PAIRS} pairs, then as many as their spread needs for +-{100 * self.options.target:.0f}%,"
                        f" at most {cap} pairs in all" if cap > MIN_PAIRS
                        else f"at most {plural(cap, 'pair')} in all (--pairs)")
            self.emit(Note(("confirming" if len(chosen) == len(new) else "confirming as well, now on the front,")
                           + f" {len(due)} configuration(s) in pairs against the baseline (trials "
                           f"{', '.join(str(c.confirmation.trial) for c in due)}; sitting {sitting + 1}: {plan})"))
            rounds.run(base.config, list(chosen.values()))
            rounds_run += 1
            stored = self.stored = read_study(self.study)  # the confirmed figures can change the front
        on_front = {r.number for r in stored.front()}
        for n in sorted(set(chosen) - on_front):  # said, not left for the reader to notice missing
            record = stored.record_of(n)
            if rounds_run and n in stored.confirmations and record is not None and record.feasible:
                vs = stored.versus_baseline(record)
                self.emit(Note(f"trial {n} {'stays off' if n in off_front else 'left'} the front: confirmed at "
                               f"throughput {vs.throughput_text()}, memory {vs.memory_text()}, another "
                               "configuration beats it on the confirmed figures"))
        return {n: c.confirmation for n, c in chosen.items()}

    def _store(self, candidate: Candidate, wall_s: float) -> None:
        c = candidate.confirmation
        StudyAttrs(self.study).set_confirmation(c)
        self.emit(Paired(c.trial, candidate.config, c, wall_s))

    def _stop_early(self, mine: Candidate, all_: list[Candidate]) -> tuple[str, str] | None:
        """Why ``mine`` needs no more pairs: beaten beyond its interval ("dominated"), or
        its intervals already decide the picks ("settled", ``advisor.core.pairs.settled``)."""
        why = self._dominated(mine, all_)
        if why:
            return "dominated", why
        why = settled(mine.confirmation, [c.confirmation for c in all_], max_pairs=self.options.max_pairs)
        return ("settled", why) if why else None

    def _dominated(self, mine: Candidate, all_: list[Candidate]) -> str | None:
        """Why ``mine`` is beaten beyond its interval: the baseline or another candidate is
        faster and smaller at a metric it does not beat beyond noise."""
        stored = self.stored
        assert stored is not None and stored.baseline is not None and stored.baseline.figures is not None
        eps = stored.epsilon
        score = {r.number: r.figures.score for r in stored.records if r.figures is not None}
        mine_score = score[mine.confirmation.trial]
        if beaten(mine.confirmation, None, stored.baseline.figures.score >= mine_score - eps):
            return "the baseline is faster and smaller beyond this interval"
        for other in all_:
            o = other.confirmation
            if other is not mine and o.trial in score and beaten(mine.confirmation, o,
                                                                 score[o.trial] >= mine_score - eps):
                return f"trial {o.trial} is faster and smaller beyond this interval"
        return None


def confirm_study(study: Any, options: ConfirmOptions, ray_address: str | None = None, trial_timeout: float = 600.0,
                  model: str | None = None, stop: Stop | None = None,
                  on_event: Listener = ignore) -> dict[int, Confirmation]:
    """``advisor confirm``: run or extend the paired confirmation of a stored study.

    Everything that can be wrong with the input is checked before Ray starts or anything
    is written (StudyError / WorkloadError, exit status 2): options, a study without a
    completed baseline, its model.py missing or changed since the study ran, a model.py
    that fails the preflight. The preflight runs as in ``advisor tune``: it fetches what
    model.py downloads, once, into this machine's caches, and the trials then read them
    offline (``advisor.workload.downloads``; not on a Ray cluster, whose other nodes'
    caches it does not fill).
    """
    from advisor.core.errors import WorkloadError
    from advisor.runner.ray_executor import RayExecutor
    from advisor.techniques.registry import preloads
    from advisor.workload.contract import load_workload
    from advisor.workload.downloads import trial_switches
    from advisor.workload.preflight import preflight

    check_confirm_options(options)
    stored = read_study(study)
    if stored.baseline is None or stored.baseline.config is None:
        raise StudyError(f"study {stored.name!r} has no completed baseline trial: nothing to confirm against")
    path, settings_attr = model or stored.attrs.get("workload_path"), stored.attrs.get("settings")
    if not path or not isinstance(settings_attr, dict):
        raise StudyError(f"study {stored.name!r} does not record its model.py or its trial settings")
    try:
        workload = load_workload(path)
    except WorkloadError as exc:
        raise WorkloadError(f"study {stored.name!r}: its model.py cannot be loaded from {path} ({exc}); "
                            "point to the file with --model PATH") from None
    if workload.sha256 != stored.attrs.get("workload_sha256"):
        raise WorkloadError(f"{path} changed since study {stored.name!r} ran (its content hash differs): "
                            "its trials cannot be confirmed with the new code")
    settings = TrialSettings.from_dict({"train_samples": 1, **settings_attr})
    if not candidates(stored, options.top):
        on_event(Note(f"study {stored.name!r}: no configuration besides the baseline is on the feasible front; "
                      "nothing to confirm"))
        return {}
    preflight(workload, settings.workload)
    ahead = preloads(item for r in candidates(stored, options.top) for item in r.config.to_dict().items())
    executor = RayExecutor(settings.device, ray_address, env=trial_switches(ray_address), preload=ahead).start()
    try:
        return Confirmer(study, workload, settings, executor, options, trial_timeout, stop, on_event).run()
    finally:
        executor.shutdown()
