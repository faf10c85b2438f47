"""A study with --budget on the real Tuner, local Ray and SQLite: once the baseline is in it
says how long the rest should take and when its search ends, and the search stops at its
share of the budget, well before its --trials, and its paired confirmation is sized to the
budget (no timing is asserted: only what was said, what was stored and why the study
stopped)."""

from __future__ import annotations

import re

from advisor.core.events import Note, chain
from advisor.core.stored import read_study
from advisor.outputs.console import TuneOutput
from advisor.outputs.summary import counts
from advisor.study.options.tune_options import TuneOptions
from advisor.study.run.plan import plan_study
from advisor.study.run.tuner import Tuner

from conftest import EXAMPLES


def test_a_budget_is_planned_from_the_baselines_times_and_kept(tmp_path, ray_session, capsys):
    # the default space: no machine measures all of it within the budget, so the budget ends the search
    # (15 s: the baseline, which runs in full whatever the budget, then a few seconds of search; every
    # line and note checked here comes with the baseline, so a slower machine changes none of them)
    options = TuneOptions(workload_path=str(EXAMPLES / "digits_mlp.py"), space="default", trials=200, budget=15,
                          storage=f"sqlite:///{tmp_path / 's.db'}", train_samples=256, metric_seeds=1)
    notes: list[str] = []
    plan = plan_study(options)
    output = TuneOutput()  # the console's lines, as `advisor tune` prints them
    outcome = Tuner(plan, on_event=chain(output.event,
                                         lambda e: notes.append(e.text) if isinstance(e, Note) else None)).run()
    lines = " ".join(capsys.readouterr().out.split())  # (the console wraps long lines)
    # each trial's line ends with the time elapsed and left of the budget
    # (the clock starts as the study opens: its first line may already show a second or two)
    first = re.search(r"time +(\d+) s elapsed, (\d+) s left of --budget 15 s; each line ends with the time left", lines)
    assert first and int(first[1]) <= 5 and 10 <= int(first[2]) <= 15, lines
    clocks = re.findall(r"(probe|trial) +\d+ .*?\[(?:\d+ min )?\d+ s elapsed, (?:\d+ min )?\d+ s left\]", lines)
    assert len(clocks) >= 2 and {"probe", "trial"} <= set(clocks), lines
    assert any(n.startswith("about ") and "from here on this machine" in n for n in notes), notes
    said = [n for n in notes if n.startswith("--budget 15 s: the search runs ")]
    assert len(said) == 1 and "is kept for the undecided candidates' seeds and the confirmation" in said[0]
    assert outcome.stop_reason in ("the search's share of the study's --budget was spent",
                                   "the study's --budget was spent")
    assert len(outcome.study.trials) < 200
    # the confirmation was planned to a quarter of the budget (or left out, saying so), and kept to it
    sized = [n for n in notes if n.startswith(("confirmation planned for", "no paired confirmation: "))]
    assert len(sized) == 1, notes
    confirmed = read_study(outcome.study).confirmations
    planned = re.match(r"confirmation planned for at most (\d+) candidate\(s\), up to (\d+) pairs each: up to "
                       r"~.*, within a quarter of --budget 15 s, cut from --confirm-top 6 and --pairs 8", sized[0])
    if planned:
        assert len(confirmed) <= int(planned[1]) and all(len(c.counted) <= int(planned[2]) for c in confirmed.values())
    else:
        assert "a --budget of" in sized[0] and confirmed == {} and not any(n.startswith("confirming") for n in notes)
    # the summary's resume line runs the trials left, not 20 more than --trials
    TuneOutput().finish(plan, outcome)
    out = " ".join(capsys.readouterr().out.split())  # (the console wraps long lines)
    left = 200 - counts(read_study(outcome.study))["trials"]
    assert f"--trials 200 (resume: run the {left} left)" in out and left > 0
