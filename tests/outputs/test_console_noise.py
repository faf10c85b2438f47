"""What tune's lines say about an infeasible trial, with and without the metric's noise."""

from __future__ import annotations

from advisor.core.objectives import Versus
from advisor.outputs.console import infeasible_text


def test_infeasible_says_whether_the_drop_is_beyond_noise():
    within = infeasible_text({"accuracy_drop": 0.004}, Versus(1.0, 1.0, -0.014, epsilon=0.02))
    assert "-1.4 pt" in within and "within the metric's noise of +-2.00 pt" in within
    beyond = infeasible_text({"accuracy_drop": 0.004, "memory_cap": 5.0}, Versus(1.0, 1.0, -0.014, epsilon=0.006))
    assert "beyond the metric's noise of +-0.60 pt" in beyond and "--memory-cap" in beyond
    assert infeasible_text({"accuracy_drop": 0.004}, None) == (
        "infeasible: accuracy worse than --max-metric-drop allows")
    assert infeasible_text({"accuracy_drop": -0.01, "memory_cap": 2.0}, None) == "infeasible: peak memory over --memory-cap"


def test_infeasible_gives_the_verdict_with_its_bounds():
    from advisor.core.feasibility import verdict

    base = [0.95, 0.94, 0.96]
    undecided = verdict([0.93], base, 0.01)  # -2 pt with +-1 pt seeds: within the noise
    text = infeasible_text({"accuracy_drop": 0.01}, Versus(1.0, 1.0, -0.02, epsilon=0.02, verdict=undecided))
    assert text.startswith("counted infeasible for now: accuracy likely worse than --max-metric-drop allows "
                           "(undecided: -2.0 pt, ")
    over_cap = infeasible_text({"accuracy_drop": 0.01, "memory_cap": 2.0},
                               Versus(1.0, 1.0, -0.02, epsilon=0.02, verdict=undecided))
    assert over_cap.startswith("infeasible: accuracy likely worse") and "--memory-cap" in over_cap  # decided anyway
    assert "straddle -1.0 pt" in text and "1 seed(s) against the baseline's 3" in text
    worse = verdict([0.80, 0.81, 0.79], base, 0.01)
    text = infeasible_text({"accuracy_drop": 0.14}, Versus(1.0, 1.0, -0.15, epsilon=0.02, verdict=worse))
    assert "accuracy worse than --max-metric-drop allows (infeasible: -15.0 pt, its 95% upper bound" in text


def test_the_front_table_says_an_interval_of_one_sitting_holds_for_its_minutes():
    from rich.console import Console

    from advisor.core.config import TrialConfig
    from advisor.core.objectives import Figures
    from advisor.core.pairs import Confirmation, Pair
    from advisor.core.stored import CONFIRMATION, StoredStudy, TrialRecord
    from advisor.outputs.console import front_table

    records = [TrialRecord(0, "complete", TrialConfig(), Figures(1000.0, 100.0, 0.95), {"accuracy_drop": -0.01},
                           baseline=True, finished_at=0.0),
               TrialRecord(1, "complete", TrialConfig(precision="bf16"), Figures(1500.0, 90.0, 0.95),
                           {"accuracy_drop": -0.01}, finished_at=1.0)]

    def caption(sittings: list[int]) -> str:
        pairs = [Pair(0.5, 1000.0, 1000.0 * r, 100.0, 90.0, sitting=s) for r, s in zip((1.49, 1.5, 1.51) * 2, sittings)]
        study = StoredStudy("s", {f"{CONFIRMATION}1": Confirmation(1, pairs, "confirmed").to_dict()}, records)
        console = Console(width=400, record=True)
        console.print(front_table(study))
        return " ".join(console.export_text().split())

    one = caption([0, 0, 0])
    assert "An interval holds for the minutes its pairs ran; on a shared machine the ratio can move further " \
           "between sittings (`advisor confirm` adds one and pools them)" in one
    two = caption([0, 0, 0, 1, 1, 1])
    assert "An interval holds" not in two  # pooled over two sittings already, and said how (a review read
    assert "Pairs from more than one sitting (one `advisor tune` or `advisor confirm`) are pooled: the centre is " \
           "the mean of the sittings' own" in two and "(one degree of freedom)" in two  # "median over the pairs")
    assert "more than one sitting" not in one
    assert "An interval holds" not in caption([])  # nothing confirmed: nothing to say of intervals
    # README command 1's table read 8,761 samples/s beside 1.23x (1.21-1.25) and a baseline of 9,006
    assert ("over that many pairs run beside it after the search (samples/s is the trial's own run in the search: "
            "divided by the baseline's it need not give the confirmed ratio)") in one


def test_a_baseline_whose_first_run_was_disturbed_shows_the_reference_its_ratios_are_to():
    """Seen by a user: the front table showed the baseline at 466 samples/s (its disturbed
    first run) while every ratio was to its re-measured 2,617, so a trial at 2,136 read
    0.82x beside 466."""
    from rich.console import Console

    from advisor.core.config import TrialConfig
    from advisor.core.objectives import Figures
    from advisor.core.stored import BASELINE_DISTURBED, BASELINE_MEASUREMENTS, StoredStudy, TrialRecord
    from advisor.outputs.console import front_table

    records = [TrialRecord(0, "complete", TrialConfig(), Figures(466.0, 100.0, 0.95), {"accuracy_drop": -0.01},
                           baseline=True, finished_at=0.0),
               TrialRecord(1, "complete", TrialConfig(batch_size=32), Figures(2136.0, 90.0, 0.95),
                           {"accuracy_drop": -0.01}, finished_at=5.0)]
    measured = [{"at": 1.0, "throughput": 2617.0}, {"at": 2.0, "throughput": 2600.0}, {"at": 3.0, "throughput": 2650.0}]

    def table(attrs: dict) -> str:
        console = Console(width=400, record=True)
        console.print(front_table(StoredStudy("s", attrs, records)))
        return " ".join(console.export_text().split())

    disturbed = table({BASELINE_MEASUREMENTS: measured, BASELINE_DISTURBED: "its first run: the sentinel ..."})
    assert "│ 0 (baseline) │ bs=64 fp32 │ 2,617 │ 1.00x" in disturbed and "466" not in disturbed
    assert "0.82x unconfirmed" in disturbed
    assert "The baseline's first run was disturbed: its samples/s is the median of its latest re-measurements" \
        in disturbed
    quiet = table({BASELINE_MEASUREMENTS: measured})  # trial 0 stood: the row is its own run, as measured
    assert "│ bs=64 fp32 │ 466 │" in quiet and "first run was disturbed" not in quiet


def test_confirmed_figures_say_when_pairs_were_disturbed():
    """A review read `0.35x (0.08-1.48), 8 pairs` of eight pairs that each had a disturbed run,
    and `1 pair` where seven more were left out: both are said."""
    from rich.console import Console

    from advisor.core.config import TrialConfig
    from advisor.core.objectives import Figures
    from advisor.core.pairs import Confirmation, Pair
    from advisor.core.stored import CONFIRMATION, StoredStudy, TrialRecord
    from advisor.outputs.console import front_table

    records = [TrialRecord(0, "complete", TrialConfig(), Figures(1000.0, 100.0, 0.95), {"accuracy_drop": -0.01},
                           baseline=True, finished_at=0.0),
               TrialRecord(1, "complete", TrialConfig(precision="bf16"), Figures(1500.0, 90.0, 0.95),
                           {"accuracy_drop": -0.01}, finished_at=1.0)]

    def study(disturbed: list[bool]) -> StoredStudy:
        pairs = [Pair(0.5, 1000.0, 1000.0 * r, 100.0, 90.0, disturbed="the configuration: moved" if d else "")
                 for r, d in zip((1.49, 1.5, 1.51, 1.48, 1.52), disturbed)]
        return StoredStudy("s", {f"{CONFIRMATION}1": Confirmation(1, pairs, "confirmed").to_dict()}, records)

    every = study([True] * 5)
    vs = every.versus_baseline(records[1])
    assert vs.throughput_text().endswith("5 pairs, every one with a disturbed run") and vs.all_disturbed
    some = study([False, False, True, False, True]).versus_baseline(records[1])
    assert some.throughput_text().endswith(", 3 pairs (2 disturbed left out)") and some.to_dict()["pairs_left_out"] == 2
    assert study([False] * 5).versus_baseline(records[1]).throughput_text().endswith(", 5 pairs")
    console = Console(width=400, record=True)
    console.print(front_table(every))
    text = " ".join(console.export_text().split())
    assert "│ 5* │" in text and "* after a pair count: pairs with a disturbed run were left out" in text
