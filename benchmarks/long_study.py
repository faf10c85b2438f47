"""Long studies: does the driver's cost per trial, its memory and its storage reads stay
flat over a 500-trial study, and does the explorer stay responsive on one?

    python benchmarks/long_study.py                          # 500 trials, then the explorer (~10 min here)
    python benchmarks/long_study.py --tiny                   # 30 trials: proves it runs
    python benchmarks/long_study.py --tui-before OLD_TUI_DIR # also time another tui/ (before/after)

The study is the real Tuner, Strategy and SQLite storage (two-stage evaluation, the
default strategy) with its trials answered by benchmarks/replay.py, so nothing trains:
the wall time is the driver's own. The recorded grid (128 configurations) is widened to
1,024 by giving each recorded batch size 8 neighbours whose figures are the recorded
cell's, scaled (faster, more memory, a little less accurate as the batch grows: made up,
named as such), so 500 trials can run without the space running out.

Measured while it runs, at trials 10, 100 and 500 (Optuna trial numbers: duplicates and
skipped configurations are trials too): the driver's wall ms per trial in the window
before each mark, its RSS, and the storage calls per trial in that window, at two levels:
what advisor asks Optuna's storage (the ``_CachedStorage`` Optuna wraps an RDBStorage in;
``get_all_trials`` there builds the whole trial list, deep-copied when ``study.trials``
asks) and what reaches the database (the RDBStorage; ``trials_read``: trial rows read
back). Each API call is attributed to the advisor line that made it.

Then the explorer on the finished study, each measurement in a fresh process, versions
interleaved, medians: time to open it (the table showing the study), to apply a filter,
and, for a study event, how long the UI thread is held and how long until the screen
shows the storage again; plus the storage calls each made.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import commit

MARKS = (10, 100, 500)
NEIGHBOURS = 8  # batch sizes per recorded one: 4 x 8 x 32 other knobs = 1,024 configurations
API_METHODS = ("get_all_trials", "get_trial", "get_study_user_attrs", "get_study_system_attrs", "get_all_studies",
               "get_study_id_from_name", "get_n_trials", "get_best_trial", "get_trial_id_from_study_id_trial_number")
DB_READS = ("_get_trials", "get_all_trials", "get_trial", "get_study_user_attrs", "get_study_system_attrs",
            "get_all_studies", "get_study_id_from_name", "get_study_name_from_id", "get_study_directions",
            "get_n_trials", "get_trial_id_from_study_id_trial_number", "_get_best_trial_id", "get_trial_user_attrs",
            "get_trial_system_attrs", "get_trial_param", "get_trial_params")


# ---- the widened grid ----------------------------------------------------------------
def widen(doc: dict[str, Any]) -> dict[str, Any]:
    """The recorded grid with each batch size b joined by b + k*b/8 (k = 1..7): the cell
    of b, throughput x (1 + 0.03k), memory x (1 + 0.05k), metric - 0.001k (made up)."""
    out = dict(doc, cells=[])
    for cell in doc["cells"]:
        b = cell["config"]["batch_size"]
        for k in range(NEIGHBOURS):
            new = copy.deepcopy(cell)
            new["config"]["batch_size"] = b + k * b // NEIGHBOURS
            for run in new["runs"] + new.get("probes", []) + new.get("accuracy_runs", []):
                if run.get("throughput"):
                    run["throughput"] *= 1 + 0.03 * k
                if run.get("peak_memory_bytes"):
                    run["peak_memory_bytes"] = int(run["peak_memory_bytes"] * (1 + 0.05 * k))
                if run.get("accuracy") is not None:
                    run["accuracy"] -= 0.001 * k
                for point in run.get("curve") or []:
                    point["metric"] -= 0.001 * k
            out["cells"].append(new)
    return out


def widened_space(doc: dict[str, Any]) -> dict[str, Any]:
    space = yaml.safe_load((HERE / "data" / Path(doc["space"]).name).read_text())
    sizes = sorted({b + k * b // NEIGHBOURS for b in space["batch_size"]["choices"] for k in range(NEIGHBOURS)})
    return {**space, "batch_size": {"choices": sizes}}


# ---- counting the storage calls ------------------------------------------------------
def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _call_site(depth: int = 2) -> str:
    """The advisor lines that led to this storage call, innermost first (``depth`` of
    them), and the Optuna function it went through."""
    frame = sys._getframe(2)
    via, sites = "", []
    while frame is not None and len(sites) < depth:
        name = frame.f_code.co_filename
        if "/optuna/" in name and not sites:
            via = frame.f_code.co_qualname
        elif "/advisor/" in name or "/tui/" in name:
            cut = name.rindex("/advisor/") if "/advisor/" in name else name.rindex("/tui/")
            sites.append(f"{name[cut + 1:]}:{frame.f_lineno} {frame.f_code.co_name}")
        frame = frame.f_back
    if not sites:
        return "(outside advisor)"
    return " <- ".join(sites) + (f" -> optuna {via}" if via else "")


class Counts:
    """Storage calls: by (level, method, call site), with the time spent in them; trial rows read."""

    def __init__(self) -> None:
        self.calls: Counter[tuple[str, str, str]] = Counter()
        self.seconds: defaultdict[tuple[str, str], float] = defaultdict(float)
        self.trials_read = 0
        self.local = threading.local()

    def wrap(self, level: str, name: str, method: Any) -> Any:
        counts = self

        def counted(*args: Any, **kwargs: Any) -> Any:
            label = name
            if name == "get_all_trials" and level == "api":  # unbound: (self, study_id, deepcopy=True, ...)
                deep = kwargs.get("deepcopy", args[2] if len(args) > 2 else True)
                label = f"get_all_trials(deepcopy={bool(deep)})"
            counts.calls[(level, label, _call_site() if level == "api" else "")] += 1
            start = time.perf_counter()
            try:
                result = method(*args, **kwargs)
            finally:
                counts.seconds[(level, label)] += time.perf_counter() - start
            if level == "db" and name in ("_get_trials", "get_all_trials"):
                counts.trials_read += len(result)
            elif level == "db" and name == "get_trial":
                counts.trials_read += 1
            return result

        return counted

    def snapshot(self) -> dict[str, Any]:
        return {"calls": Counter(self.calls), "seconds": dict(self.seconds), "trials_read": self.trials_read}


def instrument(counts: Counts) -> None:
    """Count what advisor asks Optuna's cached storage (class-wide) and what reaches each
    RDBStorage advisor opens (on the instance, so Optuna still wraps it in its cache)."""
    from optuna.storages._cached_storage import _CachedStorage

    from advisor.study.storage import stores

    for name in API_METHODS:
        setattr(_CachedStorage, name, counts.wrap("api", name, getattr(_CachedStorage, name)))
    opener = stores.open_storage

    def open_counted(url: str, must_exist: bool = False) -> Any:
        storage = opener(url, must_exist)
        for name in DB_READS:
            if hasattr(storage, name):
                setattr(storage, name, counts.wrap("db", name, getattr(storage, name)))
        return storage

    stores.open_storage = open_counted


# ---- the driver ----------------------------------------------------------------------
def run_study(trials: int, workdir: Path, model: str, seed: int = 0) -> tuple[dict[str, Any], str, str]:
    """Run one replayed study of ``trials``; the figures at each mark, the storage URL and the study name."""
    import optuna

    from advisor.core.events import Started
    from advisor.study.options.tune_options import TuneOptions
    from advisor.study.run.plan import plan_study
    from advisor.study.run.tuner import Tuner

    from replay import Grid, ReplayExecutor

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    doc = widen(json.loads((HERE / "data" / "grid_digits_cnn_cpu_parts.json").read_text()))
    (workdir / "grid.json").write_text(json.dumps(doc))
    (workdir / "space.yaml").write_text(yaml.safe_dump(widened_space(doc)))
    grid = Grid.load(workdir / "grid.json")
    counts = Counts()
    instrument(counts)
    url, name = f"sqlite:///{workdir / 'long.db'}", "long"
    marks = [m for m in MARKS if m <= trials] or [trials]
    seen: dict[int, dict[str, Any]] = {}
    started = time.perf_counter()
    replay_s = [0.0]

    def on_event(event: Any) -> None:
        if isinstance(event, Started):  # the study is open: the driver's loop starts here
            seen[0] = {"t": time.perf_counter() - started, "number": -1, "rss": _rss(), **counts.snapshot()}
        number = getattr(event, "number", None)
        if number is None or number >= 1_000_000:
            return
        for mark in marks:
            if number + 1 >= mark and mark not in seen:
                seen[mark] = {"t": time.perf_counter() - started, "number": number, "rss": _rss(), **counts.snapshot()}

    options = TuneOptions(workload_path=model, space=str(workdir / "space.yaml"), trials=trials, sampler="default",
                          seed=seed, storage=url, study_name=name, train_samples=doc["settings"]["train_samples"],
                          confirm=False, max_metric_drop=0.01)
    executor = ReplayExecutor(grid, seed=seed)
    submit = executor.submit

    def timed_submit(number: int, payload: Any) -> Any:  # the executor's own time is not the driver's
        t = time.perf_counter()
        try:
            return submit(number, payload)
        finally:
            replay_s[0] += time.perf_counter() - t

    executor.submit = timed_submit  # type: ignore[method-assign]
    study = Tuner(plan_study(options), executor=executor, on_event=on_event).run().study
    wall = time.perf_counter() - started
    end = {"t": wall, "number": len(study.trials) - 1, "rss": _rss(), **counts.snapshot()}
    return _summarise(marks + ["end"], seen, end, replay_s[0], len(study.trials)), url, name


def _summarise(marks: list[Any], seen: dict[Any, dict[str, Any]], end: dict[str, Any], replay_s: float,
               n_trials: int) -> dict[str, Any]:
    """Per-trial figures in the window before each mark, from the study's start (after
    planning and opening the storage: torch and the model are loaded by then)."""
    previous = seen[0]
    out: dict[str, Any] = {"optuna_trials": n_trials, "setup_s": round(previous["t"], 2),
                           "loop_wall_s": round(end["t"] - previous["t"], 2), "replay_executor_s": round(replay_s, 3),
                           "start_rss_mib": round(previous["rss"] / 2**20, 1), "windows": {}}
    start_rss = previous["rss"]
    for mark in marks:
        at = seen.get(mark, end)
        n = at["number"] - previous["number"]
        if n <= 0:
            continue
        calls = at["calls"] - previous["calls"]
        api: Counter[str] = Counter()
        db: Counter[str] = Counter()
        sites: Counter[str] = Counter()
        for (level, method, site), c in calls.items():
            (api if level == "api" else db)[method] += c
            if level == "api":
                sites[f"{method} <- {site}"] += c
        seconds = {f"{lv}:{m}": round(1000 * (s - previous["seconds"].get((lv, m), 0.0)) / n, 3)
                   for (lv, m), s in at["seconds"].items()}
        out["windows"][f"trials {previous['number'] + 2}-{at['number'] + 1}"] = {
            "trials": n, "driver_ms_per_trial": round(1000 * (at["t"] - previous["t"]) / n, 2),
            "rss_mib": round(at["rss"] / 2**20, 1),
            "api_calls_per_trial": {m: round(c / n, 2) for m, c in api.most_common()},
            "db_calls_per_trial": {m: round(c / n, 2) for m, c in db.most_common()},
            "db_trial_rows_read_per_trial": round((at["trials_read"] - previous["trials_read"]) / n, 1),
            "ms_in_storage_per_trial": dict(sorted(seconds.items(), key=lambda kv: -kv[1])),
            "api_calls_per_trial_by_site": {s: round(c / n, 2) for s, c in sites.most_common(25)}}
        previous = at
    out["rss_growth_mib"] = round((end["rss"] - start_rss) / 2**20, 1)
    return out


# ---- the explorer --------------------------------------------------------------------
def _use_tui(path: str) -> None:
    """Import advisor.tui from ``path`` (another version's tui/ folder) instead."""
    import importlib.util

    import advisor

    spec = importlib.util.spec_from_file_location("advisor.tui", Path(path) / "__init__.py",
                                                  submodule_search_locations=[str(path)])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["advisor.tui"] = module
    spec.loader.exec_module(module)
    advisor.tui = module  # type: ignore[attr-defined]


async def _explorer(url: str, name: str) -> dict[str, Any]:
    from advisor.tui import make_app
    from advisor.tui.data import Filters

    counts = Counts()
    instrument(counts)

    def db_calls() -> int:
        return sum(c for (level, _, _), c in counts.calls.items() if level == "db")

    async def settle(pilot: Any, screen: Any) -> None:
        while getattr(screen, "loading", False) or not screen.data.rows:
            await asyncio.sleep(0.002)
        await pilot.pause()

    t0 = time.perf_counter()
    app = make_app(url, name)
    async with app.run_test(size=(160, 50)) as pilot:
        first_frame = time.perf_counter() - t0
        screen = app.screen
        await settle(pilot, screen)
        opened = time.perf_counter() - t0
        rows = len(screen.data.rows)
        before = db_calls()
        t = time.perf_counter()
        screen.data.set_filters(Filters(max_drop_pt=0.5, memory_cap=64 * 2**20))
        screen.render_view()
        await pilot.pause()
        filtered = time.perf_counter() - t
        filter_calls = db_calls() - before
        before = db_calls()
        t = time.perf_counter()
        screen.refresh_data()  # what a study event does (the new explorer: in a worker)
        ui_held = time.perf_counter() - t
        await settle(pilot, screen)
        event_shown = time.perf_counter() - t
        event_calls = db_calls() - before
    return {"first_frame_s": first_frame, "open_s": opened, "rows": rows, "filter_s": filtered,
            "filter_db_calls": filter_calls, "event_ui_thread_s": ui_held, "event_shown_s": event_shown,
            "event_db_calls": event_calls}


def time_explorer(url: str, name: str, versions: dict[str, str | None], repeats: int) -> dict[str, Any]:
    """Each version's explorer timings, each run in a fresh process, versions interleaved; medians."""
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in versions}
    for _ in range(repeats):
        for version, path in versions.items():
            cmd = [sys.executable, __file__, "--explorer-once", url, name] + (["--tui-dir", path] if path else [])
            done = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=HERE.parent)
            runs[version].append(json.loads(done.stdout.strip().splitlines()[-1]))
    return {v: {"median": {k: statistics.median(r[k] for r in rs) for k in rs[0]}, "runs": rs}
            for v, rs in runs.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=500)
    ap.add_argument("--tiny", action="store_true", help="30 trials, 1 explorer repeat")
    ap.add_argument("--repeats", type=int, default=5, help="explorer runs per version")
    ap.add_argument("--tui-before", help="another version's tui/ folder to time the explorer of, too")
    ap.add_argument("--model", default=str(HERE.parent / "examples" / "digits_cnn.py"))
    ap.add_argument("-o", "--output", default=str(HERE / "results" / "long_study.json"))
    ap.add_argument("--explorer-once", nargs=2, metavar=("URL", "STUDY"), help=argparse.SUPPRESS)
    ap.add_argument("--tui-dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.explorer_once:
        if args.tui_dir:
            _use_tui(args.tui_dir)
        print(json.dumps(asyncio.run(_explorer(*args.explorer_once))))
        return 0
    trials, repeats = (30, 1) if args.tiny else (args.trials, args.repeats)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="adv-long-") as tmp:
        driver, url, name = run_study(trials, Path(tmp), args.model)
        print(json.dumps({k: v for k, v in driver.items() if k != "windows"}, indent=1), flush=True)
        for label, w in driver["windows"].items():
            print(f"{label}: {w['driver_ms_per_trial']} ms/trial, RSS {w['rss_mib']} MiB, "
                  f"{w['db_trial_rows_read_per_trial']} trial rows read/trial, API {w['api_calls_per_trial']}", flush=True)
        versions: dict[str, str | None] = {"this": None}
        if args.tui_before:
            versions = {"before": args.tui_before, "this": None}
        explorer = time_explorer(url, name, versions, repeats)
    for version, e in explorer.items():
        print(f"explorer ({version}): " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                                                    for k, v in e["median"].items()), flush=True)
    doc = {"what": "driver ms, RSS and storage calls per trial over a long replayed study; the explorer on it",
           "command": " ".join(["python", *sys.argv]), "date": dt.date.today().isoformat(), "commit": commit(),
           "grid": "grid_digits_cnn_cpu_parts.json widened to 1,024 configurations (see the docstring)",
           "machine": f"{os.cpu_count()} CPU cores, shared with other work (timings are noisy)",
           "wall_s": round(time.perf_counter() - started, 1), "driver": driver, "explorer": explorer}
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
