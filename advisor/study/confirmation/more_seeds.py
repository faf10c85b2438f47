"""More seeds for the front's undecided candidates (issue 29: feasibility a user can trust).

A configuration that changes the arithmetic (bf16, another batch size) trained once draws
one value of its metric; against the baseline's seeds its verdict may be *undecided*
(``advisor.core.feasibility``). Once the search is over, each such candidate of the front
(the ones confirmation would confirm: ``advisor.study.confirmation.confirm.candidates``) trains with
the baseline's other seeds, as a training run each, so both sides have as many values and
the same seeds. An undecided trial whose one value lies beyond the allowed drop is off the
front (counted infeasible) until then, yet more seeds may well decide it feasible (a user's
trial that reproduced the baseline's own seed-0 value exactly was "likely worse" than the
baseline's seed mean): the candidates are drawn from the front the study would have with
every undecided trial counted feasible (``_undecided_as_feasible``).
Its values are stored as the study attribute ``metric_seeds:<trial>``;
``StoredStudy`` then reads the trial at its seed mean, judged again. A candidate whose
metric was reused from another trial (the same training numerics) is not trained itself: its
values are that trial's: that trial trains with the seeds (on the front or not), and both
read them.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import replace
from typing import Any

from advisor.core.events import Listener, Note
from advisor.core.objectives import METRIC_DROP
from advisor.core.results import TrialPayload, TrialSettings
from advisor.core.stop import Stop
from advisor.core.stored import METRIC_REUSED, METRIC_SEEDS, StoredStudy, read_study
from advisor.core.study_attrs import StudyAttrs
from advisor.core.study_metric import EARLY_STOP
from advisor.core.units import first_line
from advisor.runner.executor import Executor, run_one
from advisor.study.confirmation.confirm import candidates


def undecided_candidates(study: Any, top: int, first_seed: int) -> list[tuple[Any, list[int]]]:
    """The front's candidates (at most ``top``) whose verdict is undecided, each with the
    baseline's seeds other than ``first_seed`` (the one every trial trains with)."""
    stored = read_study(study)
    noise = stored.metric_noise
    if noise is None or len(noise.seeds) < 2:
        return []
    out: list[tuple[Any, list[int]]] = []
    for record in candidates(_undecided_as_feasible(stored), top):
        judged = stored.verdict(record)
        if judged is None or judged.decided:
            continue
        # a metric reused from another trial (the same numerics) is that trial's: it trains the seeds
        source = record.get(METRIC_REUSED)
        trained = record if source is None else stored.record_of(source)
        if trained is None or trained.figures is None or any(t.number == trained.number for t, _ in out):
            continue
        if f"{METRIC_SEEDS}{trained.number}" in stored.attrs:
            continue  # trained with them already (an earlier run of the study)
        out.append((trained, [s for s in noise.seeds if s != first_seed]))
    return out


def _undecided_as_feasible(stored: StoredStudy) -> StoredStudy:
    """``stored`` with every undecided trial's metric counted within the allowed drop (its
    other limits as they are): the front its undecided trials could join."""
    records = []
    for r in stored.records:
        judged = stored.verdict(r) if r.state == "complete" and r.figures is not None and not r.baseline else None
        if judged is not None and not judged.decided and r.constraints.get(METRIC_DROP, 0.0) > 0 \
                and not r.get(EARLY_STOP):
            r = replace(r, constraints={**r.constraints, METRIC_DROP: 0.0})
        records.append(r)
    return replace(stored, records=records)


def train_more_seeds(study: Any, workload: Any, settings: TrialSettings, executor: Executor, top: int,
                     timeout: float, stop: Stop, on_event: Listener, part: str) -> int:
    """Train each undecided front candidate with the baseline's other seeds, one run at a
    time; returns how many candidates were trained."""
    numbers = itertools.count(3_000_000)  # executor handle numbers, apart from trials' and the watch's
    todo = undecided_candidates(study, top, settings.seed)
    if todo:
        on_event(Note(f"{len(todo)} front candidate(s) undecided within the metric's noise: training each with "
                      f"the baseline's other seed(s) ({', '.join(str(s) for s in todo[0][1])})"))
    done = 0
    while todo:
        record, seeds = todo.pop(0)
        values, used = [record.figures.score], [settings.seed]
        for seed in seeds:
            payload = TrialPayload.of(workload, record.config, replace(settings, seed=seed, part=part))
            result = run_one(executor, next(numbers), payload, timeout, stop)
            if stop.halted:
                return done
            if not result.ok or result.score is None:
                on_event(Note(f"trial {record.number} with seed {seed} failed [{result.failure_class}]: "
                              f"{first_line(result.failure_message, 200)}; its verdict leaves that seed out"))
                continue
            values.append(result.score)
            used.append(seed)
        StudyAttrs(study).set_metric_seeds(record.number, used, values)
        done += 1
        stored = read_study(study)
        judged = stored.verdict(next(r for r in stored.records if r.number == record.number))
        spec = stored.metric
        verdict_text = judged.text(spec.delta_text, spec.higher_is_better) if judged is not None else "no verdict"
        reusers = [r.number for r in stored.records if r.get(METRIC_REUSED) == record.number]
        also = f" (the metric of trial{'s' if len(reusers) > 1 else ''} {', '.join(map(str, reusers))} too)" \
            if reusers else ""
        on_event(Note(f"trial {record.number}{also}: {spec.name} over seeds {used}: "
                      f"{', '.join(spec.value_text(v) for v in values)} (mean "
                      f"{spec.value_text(statistics.fmean(values))}); {verdict_text}"))
        # a verdict changes the front: an undecided trial that this one kept off the candidates may be
        # one now (a review's second run of the same finished command trained it, changing its verdict)
        queued = {r.number for r, _ in todo}
        for later in undecided_candidates(study, top, settings.seed):
            if later[0].number not in queued:
                todo.append(later)
                on_event(Note(f"trial {later[0].number} is a front candidate now, undecided too: training it "
                              "with the same seeds"))
    return done
