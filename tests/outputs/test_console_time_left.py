"""With a time limit (--budget or --timeout), tune's lines end with the time elapsed and
left; without one they are as before. The console's clock is set by the test, so that the
text is exact; a real study with --budget is in tests/study/test_budget_study.py."""

from __future__ import annotations

import io

from rich.console import Console

from advisor.core.config import TrialConfig
from advisor.core.events import Finished, Probed, TimeLimit
from advisor.core.results import TrialResult
from advisor.outputs.console import TuneOutput


def _output(now: list[float]) -> tuple[TuneOutput, io.StringIO]:
    out = TuneOutput()
    text = io.StringIO()
    out.console = Console(file=text, width=200, highlight=False)
    out.clock = lambda: now[0]
    return out, text


def _events() -> list:
    probe = TrialResult(ok=True, throughput=5897.0, peak_memory_bytes=14_000_000)
    return [Probed(0, TrialConfig(batch_size=64), probe, 4.3),
            Finished(3, TrialConfig(batch_size=128), TrialResult.failed("error", "boom"), 1.5, None)]


def test_with_a_budget_each_line_ends_with_the_time_elapsed_and_left():
    now = [500.0]
    out, text = _output(now)
    out.event(TimeLimit(500.0, 1800.0, "--budget"))
    now[0] = 565.2
    for event in _events():
        out.event(event)
    lines = text.getvalue().splitlines()
    assert lines[0] == ("time      0 s elapsed, 30 min 00 s left of --budget 30 min 00 s; each line ends with the "
                        "time left")
    assert lines[1].startswith("probe   0    4.3 s  bs=64 fp32") and lines[1].endswith(
        "5,897 samples/s, 13.4 MiB  [1 min 05 s elapsed, 28 min 55 s left]")
    assert lines[2].endswith("FAILED [error] boom  [1 min 05 s elapsed, 28 min 55 s left]")
    now[0] = 500.0 + 2000.0  # past the limit: the steps after the search finish their round
    out.event(_events()[0])
    assert text.getvalue().splitlines()[-1].endswith("[33 min 20 s elapsed, 0 s left]")


def test_without_a_limit_the_lines_are_as_before():
    out, text = _output([0.0])
    for event in _events():
        out.event(event)
    assert "elapsed" not in text.getvalue() and text.getvalue().splitlines()[1].endswith("FAILED [error] boom")
