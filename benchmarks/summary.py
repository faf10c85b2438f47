"""Collect the headline figures of the latest benchmark results into
benchmarks/results/summary.json, each next to the date and commit it was measured at.

    python benchmarks/summary.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
KEPT = ("gpu", "suite", "readme")  # written by hand from their own runs (benchmarks/gpu, README commands 2 and 1)
TARGETS = {"search.hv_fraction_at_10pct_grid": ">= 0.95", "search.trials_ratio_vs_random": "<= 0.333",
           "overhead.fraction": "<= 0.25", "overhead.fixed_per_trial_s": "<= 2.0",
           "fidelity.throughput_cv": "<= 0.03", "fidelity.memory_spread": "<= 0.02",
           "trust.pick_ratio_agreement": "<= 0.05", "trust.disturbed_baseline_error": "<= 0.05",
           "trust.confirm_share": "<= 0.20", "trust.ci_halfwidth": "<= 0.03", "trust.coverage_simulated": ">= 0.93",
           "trust.sentinel_rerun_share_quiet": "<= 0.05",
           "search.wall_ratio_vs_previous_default": "<= 0.333", "search.hv_fraction_at_10pct_wall": ">= 0.95",
           "search.real_time_to_best_ratio": "<= 0.333",
           "long.driver_ms_ratio_500_vs_100": "<= 1.2", "long.rss_growth_mib": "<= 64",
           "long.tui_event_ui_thread_s": "<= 0.05", "long.tui_filter_s": "<= 0.5",
           "memory.estimate_error_vs_tensors": "<= 0.05", "memory.estimate_error_vs_measured": "<= 0.25",
           "probe.cost_over_training_run": "<= 0.333"}


def _entry(doc: dict, value: object, key: str) -> dict:
    target = TARGETS[key]
    bound = float(target.split()[1])
    met = None if not isinstance(value, (int, float)) else (value >= bound if target.startswith(">=") else value <= bound)
    return {"value": value, "target": target, "met": met, "date": doc.get("date"), "commit": doc.get("commit"),
            "source": doc.get("command")}


def main() -> int:
    search = json.loads((RESULTS / "search_efficiency.json").read_text())
    overhead = json.loads((RESULTS / "overhead.json").read_text())
    fidelity = json.loads((RESULTS / "fidelity.json").read_text())
    ours = search["summary"]["default"]
    summary = {
        "search": {
            "hv_fraction_at_10pct_grid": _entry(search, ours["hv_fraction_at_10pct_grid"],
                                                "search.hv_fraction_at_10pct_grid"),
            "trials_ratio_vs_random": _entry(search, search["summary"]["trials_to_random_final"]["ratio"],
                                             "search.trials_ratio_vs_random"),
            "best_first_with_grid_known_at_10pct_grid": search["summary"].get("oracle", {}).get(
                "hv_fraction_at_10pct_grid"),
        },
        "overhead": {"fraction": _entry(overhead, overhead["fraction"], "overhead.fraction"),
                     "fixed_per_trial_s": _entry(overhead, overhead["fixed_per_trial_s"], "overhead.fixed_per_trial_s")},
        "fidelity": {"throughput_cv": _entry(fidelity, fidelity["throughput_cv"], "fidelity.throughput_cv"),
                     "memory_spread": _entry(fidelity, fidelity["memory_spread"], "fidelity.memory_spread"),
                     "study_throughput_rank_correlation": fidelity["studies"]["throughput_rank_correlation"]},
    }
    before_model = RESULTS / "search_efficiency_before_model.json"
    if before_model.exists():  # the default strategy just before the model of effects, the same day
        earlier = json.loads(before_model.read_text())
        summary["search"]["hv_fraction_at_10pct_grid"]["before_model"] = {
            "value": earlier["summary"]["default"]["hv_fraction_at_10pct_grid"], "commit": earlier["commit"]}
    simulated = RESULTS / "search_simulated.json"
    if simulated.exists():  # benchmarks/search_simulated.py: a machine whose effects are known
        sim = json.loads(simulated.read_text())
        earlier_sim = RESULTS / "search_simulated_before_model.json"
        summary["search"]["simulated_true_front_at_budget"] = {
            "budget": sim["budget"], "by_sampler": {s: v["final"] for s, v in sim["summary"].items()},
            "date": sim["date"], "commit": sim["commit"], "source": sim["command"]} | (
            {"default_before_model": json.loads(earlier_sim.read_text())["summary"]["default"]["final"]}
            if earlier_sim.exists() else {})
    held_out = RESULTS / "search_efficiency_mlp.json"
    if held_out.exists():  # the second grid, on which nothing was tuned
        other = json.loads(held_out.read_text())["summary"]
        summary["search"]["held_out_digits_mlp_grid"] = {
            "hv_fraction_at_10pct_grid": {s: other[s]["hv_fraction_at_10pct_grid"] for s in other if s != "trials_to_random_final"},
            "trials_ratio_vs_random": other.get("trials_to_random_final", {}).get("ratio")}
    two_stage_file = RESULTS / "two_stage.json"
    if two_stage_file.exists():  # benchmarks/two_stage.py: two-stage evaluation on the clock
        ts = json.loads(two_stage_file.read_text())
        summary["search"]["wall_ratio_vs_previous_default"] = _entry(
            ts, ts["wall_ratio_vs_previous_default"], "search.wall_ratio_vs_previous_default") | {
            "per_grid": {name: g["wall_ratio"] for name, g in ts["grids"].items()}}
        summary["search"]["hv_fraction_at_10pct_wall"] = _entry(
            ts, ts["hv_fraction_at_10pct_wall"], "search.hv_fraction_at_10pct_wall")
        summary["search"]["hv_at_13_proposals"] = {
            name: {mode: g["modes"][mode]["median"]["hv_at_13_proposals"] for mode in g["modes"]}
            for name, g in ts["grids"].items()}
    real_file = RESULTS / "real_study.json"
    if real_file.exists():  # benchmarks/real_study.py: both defaults on one real study's wall time
        real = json.loads(real_file.read_text())
        summary["search"]["real_time_to_best_ratio"] = _entry(
            real, real["real_time_to_best_ratio"], "search.real_time_to_best_ratio") | {
            "search_wall_previous_s": real["search_wall_s"], "search_wall_new_s": real.get("search_wall_b_s"),
            "wall_ratio_same_trials": real.get("wall_ratio"), "t_previous_s": real["t_a_s"], "t_new_s": real["t_b_s"],
            "best_previous": real["a"]["best"], "best_new": real["b"]["best"]}
    trust_file = RESULTS / "trust.json"
    if trust_file.exists():  # benchmarks/trust.py: figures a user can act on
        trust = json.loads(trust_file.read_text())
        agreement, disturbed = trust["pick_ratio_agreement"], trust["disturbed_baseline_error"]
        summary["trust"] = {
            "pick_ratio_agreement": _entry(trust, agreement["value"], "trust.pick_ratio_agreement")
            | {"picks_consistent": agreement["picks_consistent"]},
            "disturbed_baseline_error": _entry(trust, disturbed["value"], "trust.disturbed_baseline_error")
            | {"unconfirmed_error": disturbed["unconfirmed_value"]},
            "confirm_share": _entry(trust, trust["confirm_share"], "trust.confirm_share"),
            "ci_halfwidth": _entry(trust, trust["ci_halfwidth"], "trust.ci_halfwidth"),
            "readme_command_1_wall_s": trust["readme_command_1_wall_s"],
        }
    coverage_file = RESULTS / "coverage_sim.json"
    if coverage_file.exists():  # benchmarks/coverage_sim.py: the confirmed interval's coverage, simulated
        cov = json.loads(coverage_file.read_text())
        summary.setdefault("trust", {})["coverage_simulated"] = _entry(
            cov, cov["coverage_simulated"], "trust.coverage_simulated") | {
            "old_rule": cov["old_rule_coverage"], "replicates": cov["replicates"],
            "what": "the lowest coverage of the shown 95% interval over the scenarios (one to three sittings)"}
    sentinel_file = RESULTS / "sentinel.json"
    if sentinel_file.exists():  # benchmarks/sentinel.py: trials run again for interference, quiet and loaded
        sen = json.loads(sentinel_file.read_text())
        phases = sen["phases"]
        summary.setdefault("trust", {})["sentinel_rerun_share_quiet"] = _entry(
            sen, sen["sentinel_rerun_share_quiet"], "trust.sentinel_rerun_share_quiet") | {
            "trials_quiet": phases["quiet"]["trials"],
            "old_rule_quiet": phases["quiet"]["old_rule_rerun_share"],
            # how quiet "quiet" was: the machine's other users stay
            "quiet_load_average": [phases["quiet"]["load_average_before"], phases["quiet"]["load_average_after"]],
            "quiet_block_score_median": phases["quiet"]["block_score_median"],
            "quiet_throughput_cv": phases["quiet"]["throughput_cv"],
            "limit_at_end": phases["quiet"]["limit_at_end"],
            "loaded": {name: {"trials": p["trials"], "rerun_share": p["rerun_share"],
                              "old_rule_rerun_share": p["old_rule_rerun_share"],
                              "dropped_block_share": p["dropped_block_share"]}
                       for name, p in phases.items() if name != "quiet"},
            "what": "share of real probes run again for interference (too few clean blocks), by the study's rule"}
    long_file = RESULTS / "long_study.json"
    if long_file.exists():  # benchmarks/long_study.py: a 500-trial study's driver and explorer
        long = json.loads(long_file.read_text())
        windows, explorer = long["driver"]["windows"], long["explorer"]["this"]["median"]
        at_100, at_500 = windows["trials 11-100"]["driver_ms_per_trial"], windows["trials 101-500"]["driver_ms_per_trial"]
        summary["long_study"] = {
            "driver_ms_ratio_500_vs_100": _entry(long, at_500 / at_100, "long.driver_ms_ratio_500_vs_100")
            | {"driver_ms_per_trial": {name: w["driver_ms_per_trial"] for name, w in windows.items()}},
            "rss_growth_mib": _entry(long, long["driver"]["rss_growth_mib"], "long.rss_growth_mib"),
            "tui_event_ui_thread_s": _entry(long, explorer["event_ui_thread_s"], "long.tui_event_ui_thread_s")
            | ({"before": long["explorer"]["before"]["median"]["event_ui_thread_s"]} if "before" in long["explorer"] else {}),
            "tui_filter_s": _entry(long, explorer["filter_s"], "long.tui_filter_s") | {"open_s": explorer["open_s"]},
        }
        earlier_file = RESULTS / "long_study_before_model.json"
        if earlier_file.exists():  # the driver just before the model of effects, the same day
            earlier = json.loads(earlier_file.read_text())
            summary["long_study"]["driver_ms_ratio_500_vs_100"]["before_model"] = {
                "commit": earlier["commit"], "driver_ms_per_trial": {
                    name: w["driver_ms_per_trial"] for name, w in earlier["driver"]["windows"].items()}}
    stopping_file, cost_file = RESULTS / "probe_stopping.json", RESULTS / "probe_cost.json"
    if stopping_file.exists():  # benchmarks/probe_stopping.py: the probes' stopping rule replayed
        stop = json.loads(stopping_file.read_text())
        summary.setdefault("probe", {})["stopping_replayed"] = {
            "cost_ratio_vs_before": stop["cost_ratio_median"], "abs_log_vs_before": stop["abs_log_now_vs_before_median"],
            "interval_covers_before": stop["interval_covers_before"], "capped_share": stop["capped_share"],
            "between_processes_sd": stop["between_processes_sd_median"], "tolerance": stop["tolerance"],
            "date": stop["date"], "commit": stop["commit"], "source": stop["command"],
            "what": "seconds of steps a probe times, now against the rule before (median of recorded runs), and "
                    "how far its figure moves"}
    if cost_file.exists():  # benchmarks/probe_cost.py: a probe's wall against its training run's, real studies
        cost = json.loads(cost_file.read_text())
        now = cost["by_label"].get("now") or {}
        summary.setdefault("probe", {})["cost_over_training_run"] = _entry(
            cost, now.get("probe_over_training_wall"), "probe.cost_over_training_run") | {
            "by_label": {label: {k: v for k, v in o.items() if k != "with_training_run"}
                         for label, o in cost["by_label"].items()},
            "what": "median over trials of a probe's wall over the training run's (README command 1's studies)"}
    memory_file = RESULTS / "memory_estimate.json"
    if memory_file.exists():  # benchmarks/memory_estimate.py: the memory plan against measured peaks
        mem = json.loads(memory_file.read_text())
        summary["memory"] = {
            "estimate_error_vs_tensors": _entry(mem, mem["max_abs_error_vs_tracked"], "memory.estimate_error_vs_tensors")
            | {"cases": mem["tracked_cases"], "what": "max |estimate / the same steps' real tensor peak - 1|"},
            "estimate_error_vs_measured": _entry(mem, mem["median_abs_error"], "memory.estimate_error_vs_measured")
            | {"max": mem["max_abs_error"], "median_signed": mem["median_error"], "cases": mem["estimated"],
               "device": mem["device"], "what": "median |estimate / measured peak - 1| (on a CPU: resident memory)"},
        }
    parallel_file = RESULTS / "parallelism.json"
    if parallel_file.exists():  # benchmarks/parallelism.py: each strategy against the baseline (information)
        par = json.loads(parallel_file.read_text())
        summary["parallelism"] = {"date": par["date"], "commit": par["commit"], "source": par["command"],
                                  "example": par["example"], "device": par["device"], "strategies": {
            name: {k: row.get(k) for k in ("throughput_ratio", "memory_ratio", "accuracy_delta")}
            for name, row in par["strategies"].items()}}
    # the sections no result file here computes (the GPU check's figures, the suite's time, README command 1's):
    # kept as they were written, each with its own source
    path = RESULTS / "summary.json"
    kept = json.loads(path.read_text()) if path.exists() else {}
    summary |= {name: section for name, section in kept.items() if name in KEPT and name not in summary}
    path.write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
