"""An inference trial's latency calls are judged for interference as its timed blocks are
(``advisor.trial.latency``): the calls of a disturbed window are dropped, a measurement
with too few clean windows is run again, and one on a busy machine is marked. The machine's
counters cannot be made busy on cue, so a scripted stand-in (named as such) plays them: each
call advances a run-queue clock, waiting during the calls the script disturbs, and those
calls take longer, as a neighbour's would."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from advisor.core.caveats import speed_caveats
from advisor.core.interference import rerun_reason
from advisor.core.latency import Latency, over_limit_text
from advisor.trial.latency import WINDOW_S, measure_latency


class ScriptedServer:
    """A stand-in for a prepared model and the process's counters: a call lasts ``quiet_s``,
    or ``busy_s`` when ``disturbed(call)``, and the counters record that extra time as time
    spent waiting for a CPU."""

    def __init__(self, disturbed, quiet_s=0.002, busy_s=0.02, world=2):
        self.disturbed, self.quiet_s, self.busy_s = disturbed, quiet_s, busy_s
        self.calls, self.run_s, self.wait_s = 0, 0.0, 0.0
        self.config = SimpleNamespace(batch_size=8)
        self.ranks = SimpleNamespace(world=world)  # several ranks: no batch-1 phase (not this test's)

    def predict(self, x):
        hit = self.disturbed(self.calls)
        time.sleep(self.busy_s if hit else self.quiet_s)
        self.run_s += self.quiet_s
        self.wait_s += (self.busy_s - self.quiet_s) if hit else 0.0001 * self.quiet_s
        self.calls += 1

    def synchronize(self):
        pass

    def counters(self):
        return {"run_s": self.run_s, "wait_s": self.wait_s}


@pytest.fixture
def measure(monkeypatch):
    import advisor.trial.latency as module

    monkeypatch.setattr(module, "agree_more", lambda prepared, want: want)  # one rank stands for all here

    def run(server, limit=None, counters=None):
        return measure_latency(server, iter(lambda: (0, 0), None), None, None, limit,
                               counters=counters or server.counters)
    return run


def test_the_calls_of_a_disturbed_window_are_dropped_and_the_tail_is_the_clean_calls(measure):
    server = ScriptedServer(lambda call: 60 <= call < 90)  # a neighbour for ~3 windows in the middle
    lat = measure(server)
    assert lat.windows >= 8 and 1 <= lat.disturbed_windows < lat.windows / 2
    assert lat.dropped_calls >= 20 and lat.calls == server.calls - lat.dropped_calls
    assert lat.p99_ms < 1e3 * server.busy_s * 0.75  # the disturbed calls' 20 ms is not the tail
    assert not lat.too_few_clean and not lat.busy and lat.mark == ""
    assert rerun_reason({"latency": lat.to_dict()}) is None
    assert Latency.from_dict(lat.to_dict()) == lat


def test_too_few_clean_windows_keep_every_call_and_run_the_trial_again(measure):
    server = ScriptedServer(lambda call: call % 40 >= 10)  # three quarters of the time, in long stretches
    lat = measure(server, limit=0.05)  # the study's limit, from its quiet blocks
    assert lat.too_few_clean and lat.dropped_calls == 0 and lat.calls == server.calls
    why = rerun_reason({"latency": lat.to_dict()})
    assert why is not None and "windows of its latency calls: too few clean calls remain" in why
    assert rerun_reason({"latency": lat.to_dict(), "interference": {"blocks": 9, "clean": 9}}) == why


def test_a_machine_busy_throughout_marks_the_latency_where_it_is_shown_and_judged(measure):
    server = ScriptedServer(lambda call: True)
    lat = measure(server)  # no study limit yet: the windows' own spread finds nothing to drop
    assert lat.busy and not lat.too_few_clean and lat.dropped_calls == 0 and lat.mark == " (busy)"
    (caveat,) = speed_caveats({"latency": lat.to_dict()})
    assert caveat.kind == "busy" and "its latency was timed on a busy machine" in caveat.text
    assert over_limit_text(12.3, 10, lat.busy).endswith("(timed on a busy machine: it may read slow)")
    quiet = measure(ScriptedServer(lambda call: False))
    assert not quiet.busy and quiet.dropped_calls == 0 and speed_caveats({"latency": quiet.to_dict()}) == []


def test_without_counters_every_call_counts(measure):
    lat = measure(ScriptedServer(lambda call: 60 <= call < 90), counters=lambda: None)
    assert lat.dropped_calls == 0 and lat.disturbed_windows == 0 and not lat.busy
    assert lat.windows >= 1 and WINDOW_S > 0


@pytest.mark.parametrize("stored", [{"batch_size": 8, "calls": 5, "p50_ms": 1.0, "p95_ms": 2.0, "p99_ms": 3.0}])
def test_a_latency_stored_before_the_interference_fields_reads_as_clean(stored):
    lat = Latency.from_dict(stored)
    assert lat is not None and lat.dropped_calls == 0 and not lat.busy and lat.mark == ""
