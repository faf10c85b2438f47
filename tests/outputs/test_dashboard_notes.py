"""`advisor dashboard`: the figures a user acts on, in optuna-dashboard's notes, read back
through optuna-dashboard's own web API (its WSGI app, in this process; and its server over
HTTP, in a process of its own), and equal to what `advisor report` and `advisor trials`
show for the same trial: one ratio per trial everywhere.

The study is the recorded one (``recorded_study``: fixed figures, no trial run), with the
baseline's metric over 3 seeds (so verdicts have bounds), two trials confirmed in pairs
(stored as ``advisor confirm`` stores them: a study attribute ``confirmation:<trial>``)
and a probed-only trial.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from types import SimpleNamespace

import pytest
from dashboard_api import get, put

from advisor.core.events import Finished, Paired
from advisor.core.pairs import Confirmation, Pair
from advisor.core.stored import CONFIRMATION, METRIC_NOISE, read_study
from advisor.study.storage import stores as st

from conftest import REPO, exit_status, skip_without
from pg_server import pg_database, pg_server  # noqa: F401  (fixtures)
from recorded_study import NAME, add_probed_trial, write_recorded_study

skip_without("optuna_dashboard")
CONFIRMED = {2: (1.70, 1.31), 1: (1.48, 1.02)}  # trial: (throughput ratio, memory ratio), made up
WOBBLE = (0.99, 1.01, 1.0, 0.985, 1.015, 1.005)  # pair to pair, made up


def confirm(study, trial: int, pairs: int, sitting: int = 0) -> Confirmation:
    """A paired confirmation stored as ``Confirmer._store`` stores one (more pairs, when
    the trial has some already)."""
    stored = read_study(study).confirmations.get(trial) or Confirmation(trial)
    thr, mem = CONFIRMED[trial]
    for i in range(pairs):
        w = WOBBLE[(len(stored.pairs) + i) % len(WOBBLE)]
        stored.pairs.append(Pair(0.5, 6700.0, 6700.0 * thr * w, 100e6, 100e6 * mem * (1 + (w - 1) / 4),
                                 sitting=sitting))
    stored.settle(0.03, 8, sitting)
    study.set_user_attr(f"{CONFIRMATION}{trial}", stored.to_dict())
    return stored


@pytest.fixture
def url(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = write_recorded_study(url)
    study.set_user_attr(METRIC_NOISE, {"seeds": [0, 1, 2], "values": [0.9667, 0.9600, 0.9720]})
    for trial in CONFIRMED:
        confirm(study, trial, 6)
    add_probed_trial(study)
    return url


def served(url: str) -> tuple[dict, dict[int, str], str]:
    """The study as optuna-dashboard's API gives it: its JSON, each trial's note by trial
    number, the study's note."""
    storage = st.open_storage(url, must_exist=True)
    from optuna_dashboard._app import create_app

    app = create_app(storage)
    status, body = get(app, f"/api/studies/{storage.get_study_id_from_name(NAME)}")
    assert status.startswith("200"), body[:500]
    data = json.loads(body)
    return data, {t["number"]: t["note"]["body"] for t in data["trials"]}, data["note"]["body"]


def cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def note_row(note: str, what: str) -> list[str]:
    """A row of a trial note's table: [what, measured, vs the baseline]."""
    return next(cells(line) for line in note.splitlines() if line.startswith(f"| {what} |"))


def test_the_dashboard_shows_each_trials_ratios_intervals_and_verdict_as_report_and_trials_do(url, tmp_path, capsys):
    assert exit_status(["dashboard", "--storage", url, "--no-serve"]) == 0
    assert capsys.readouterr().out == f"notes: study {NAME}: 11 notes written, 0 unchanged\n"
    data, notes, study_note = served(url)
    assert exit_status(["trials", NAME, "--storage", url, "--json"]) == 0
    listed = {t["trial"]: t for t in json.loads(capsys.readouterr().out)["trials"]}
    assert exit_status(["trials", NAME, "--storage", url]) == 0
    console = capsys.readouterr().out
    # trial 6 (-2.2 pt, seeds +-0.6 pt, one seed against three): undecided, off the front for now, as tune says
    assert "(counted infeasible for now: undecided)" in " ".join(console.split())
    assert exit_status(["report", "--storage", url, "-o", str(tmp_path / "report"), "--json"]) == 0
    reported = json.loads(capsys.readouterr().out)
    report = (tmp_path / "report" / "report.md").read_text()
    rows = [c for c in map(cells, report.split("## Pareto front")[1].split("## ")[0].splitlines()) if c]
    front = {int(re.match(r"\d+", c[0])[0]): c for c in rows if c[0][:1].isdigit()}
    assert set(front) == {0, 1, 2, 3, 4, 10}

    for number, row in front.items():  # the same texts as the report's front, trial by trial
        note = notes[number]
        assert note_row(note, "throughput")[2] == row[3] and note_row(note, "peak memory")[2] == row[5], note
        assert note_row(note, "accuracy")[2] == row[7], note
        assert ("on the Pareto front" in note) == ("not on the front" not in row[0])
    for number, (thr, mem) in CONFIRMED.items():  # confirmed: median, 95% interval, pairs, as listed
        vs = listed[number]["vs_baseline"]
        assert vs["confirmed"] and vs["pairs"] == 6
        (lo, hi), (mlo, mhi) = vs["throughput_interval"], vs["memory_interval"]
        text = f"{vs['throughput_ratio']:.2f}x ({lo:.2f}-{hi:.2f}), 6 pairs"
        assert note_row(notes[number], "throughput")[2] == text and text in study_note
        assert note_row(notes[number], "peak memory")[2] == f"{vs['memory_ratio']:.2f}x ({mlo:.2f}-{mhi:.2f}), 6 pairs"
        assert f"{vs['throughput_ratio']:.2f}x ({lo:.2f}-{hi:.2f})" in console  # the console's cell
        assert "confirmed in pairs against the baseline, medians with 95% intervals over 6 pairs" in notes[number]
    for number, t in listed.items():
        vs, note = t["vs_baseline"], notes.get(number, "")
        if t["state"] in ("failed", "skipped"):
            assert note == ""  # optuna-dashboard shows their failure class and message itself
            continue
        if vs is None or t["baseline"]:
            continue
        if not vs["confirmed"]:  # unconfirmed ratios say so, with the same number
            assert note_row(note, "throughput")[2] == f"{vs['throughput_ratio']:.2f}x unconfirmed"
            assert "unconfirmed: one trial against the baseline as measured by then" in note
            assert f"{vs['throughput_ratio']:.2f}x unconfirmed" in console
        if t["state"] == "complete":  # the metric's verdict with its bounds, as `advisor trials --json` has it
            kind, (low, high) = vs["metric_verdict"], vs["metric_bounds"]
            bound = {"feasible": f"{100 * low:+.1f} pt above", "infeasible": f"{100 * high:+.1f} pt below",
                     "undecided": f"{100 * low:+.1f} pt to {100 * high:+.1f} pt straddle"}[kind]
            assert f"{kind}: " in note and bound in note, note
            off = "infeasible:" in note or (kind == "undecided" and "counted infeasible for now:" in note)
            assert off == (not t["feasible"])
    assert "probed only" in notes[11] and note_row(notes[11], "throughput")[2].endswith("x unconfirmed")

    # the study's note: what was measured where, the baseline, the picks (as the report picks), the front
    for text in ("`/home/me/examples/digits_cnn.py` (train), 7,185 training samples per trial, device cpu",
                 "AMD EPYC, 2 CPU cores; GPUs: none; torch 2.13.0+cpu",
                 "**Baseline**: trial 0 `bs=64 fp32`: 6,736 samples/s, 98.6 MiB, accuracy 0.9662 (mean of 3 seeds",
                 "trials 1, 2 confirmed in pairs"):
        assert text in study_note, study_note
    for how, number in reported["picks"].items():
        assert f"- **{how}**: trial {number} " in study_note
        assert f"--trial {number} -o {how}.yaml" in study_note
        assert f"**{how}**" in notes[number]
    assert len([line for line in study_note.splitlines() if line.startswith("| ") and line[2].isdigit()]) == 6
    assert data["trials"][0]["note"]["version"] == 1


def test_writing_twice_writes_nothing_new_and_the_users_own_text_is_kept(url, capsys):
    storage = st.open_storage(url, must_exist=True)
    study_id = storage.get_study_id_from_name(NAME)
    assert exit_status(["dashboard", "--storage", url, "--no-serve"]) == 0
    first = storage.get_study_system_attrs(study_id)
    assert exit_status(["dashboard", "--storage", url, "--study", NAME, "--no-serve"]) == 0
    assert storage.get_study_system_attrs(study_id) == first  # no version counted up, no chunk added
    assert capsys.readouterr().out.splitlines()[-1] == f"notes: study {NAME}: 0 notes written, 11 unchanged"

    # the user writes in trial 2's note with the dashboard's editor; then more pairs land
    from optuna_dashboard._app import create_app

    app = create_app(storage)
    _, notes, _ = served(url)
    trial_id = next(t._trial_id for t in storage.get_all_trials(study_id) if t.number == 2)
    mine = notes[2] + "\nMy own note: try this one in production.\n"
    status, body = put(app, f"/api/studies/{study_id}/{trial_id}/note", {"version": 2, "body": mine})
    assert status.startswith("204") or status.startswith("200"), body
    import optuna

    confirm(optuna.load_study(study_name=NAME, storage=storage), 2, 2, sitting=1)
    assert exit_status(["dashboard", "--storage", url, "--no-serve"]) == 0
    assert "notes written" in capsys.readouterr().out
    data, notes, _ = served(url)
    assert notes[2].count("[//]: # (advisor: begin") == 1 and notes[2].count("[//]: # (advisor: end)") == 1
    assert notes[2].endswith("My own note: try this one in production.\n")
    assert ", 8 pairs |" in note_row(notes[2], "throughput")[2] + " |"
    assert next(t for t in data["trials"] if t["number"] == 2)["note"]["version"] == 3


def test_bad_input_is_exit_2_and_writes_nothing(url, tmp_path, monkeypatch, capsys):
    storage = st.open_storage(url, must_exist=True)
    study_id = storage.get_study_id_from_name(NAME)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for args, text in [
            (["--study", "nope"], "no study named 'nope'"),
            (["--storage", f"sqlite:///{tmp_path / 'none.db'}"], "does not exist"),
            (["--port", str(port)], f"port {port} on 127.0.0.1 is in use"),
            (["--host", "203.0.113.7"], "is not an address of this machine"),
            (["--port", "70000"], "expected a port number (0-65535), found '70000'"),
            (["--port", "http"], "expected a port number"),
        ]:
            argv = ["dashboard", *(["--storage", url] if "--storage" not in args else []), *args]
            assert exit_status(argv) == 2, argv
            assert text in capsys.readouterr().err, argv
    monkeypatch.setitem(sys.modules, "optuna_dashboard", None)  # not installed
    assert exit_status(["dashboard", "--storage", url, "--no-serve"]) == 2
    assert "optuna-dashboard is not installed" in capsys.readouterr().err
    assert not any(k.startswith("dashboard:") for k in storage.get_study_system_attrs(study_id))


@pytest.mark.timeout(120)
def test_the_server_answers_its_api_over_http_with_the_notes_and_stops_on_ctrl_c(url):
    server = subprocess.Popen([sys.executable, "-m", "advisor", "dashboard", "--storage", url, "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(REPO)},
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as in a terminal
    try:
        said = [server.stdout.readline() for _ in range(2)]  # the notes written, then where it listens
        assert said[0] == f"notes: study {NAME}: 11 notes written, 0 unchanged\n", said
        where = re.fullmatch(r"optuna-dashboard: (http://127\.0\.0\.1:\d+)/dashboard/studies/(\d+) {3}"
                             r"\(Ctrl-C stops it\)\n", said[1])
        assert where, said
        base, study_id = where[1], int(where[2])
        with urllib.request.urlopen(f"{base}/api/studies", timeout=10) as response:
            assert [s["study_id"] for s in json.load(response)["study_summaries"]] == [study_id]
        with urllib.request.urlopen(f"{base}/api/studies/{study_id}", timeout=10) as response:
            detail = json.load(response)
        assert "### advisor: study digits_cnn-cpu" in detail["note"]["body"]
        assert "1.70x (" in next(t for t in detail["trials"] if t["number"] == 2)["note"]["body"]
        server.send_signal(signal.SIGINT)  # at once: a Ctrl-C as the last answer leaves must still stop it
        out, err = server.communicate(timeout=20)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert server.returncode == 0, err
    assert out == "optuna-dashboard stopped\n" and err == "", (out, err)


def test_a_running_study_writes_a_trials_note_when_it_is_stored_and_when_a_pair_lands(url):
    import optuna

    from advisor.outputs.dashboard import DashboardNotes

    study = optuna.load_study(study_name=NAME, storage=st.open_storage(url, must_exist=True))
    stored = read_study(study)
    listener = DashboardNotes(url, NAME)
    record = next(r for r in stored.records if r.number == 3)
    listener.event(Finished(3, record.config, None, 5.0, record))  # type: ignore[arg-type]
    _, notes, study_note = served(url)
    assert set(notes.values()) == {"", notes[3]} and "1.62x unconfirmed" in notes[3] and study_note
    c = stored.confirmations[2]
    listener.event(Paired(2, stored.records[2].config, c, 3.0))  # type: ignore[arg-type]
    _, notes, _ = served(url)
    assert "6 pairs" in notes[2] and notes[1] == ""
    listener.close()
    _, notes, _ = served(url)
    assert "6 pairs" in notes[1]

    told = []
    broken = DashboardNotes(f"sqlite:///{url.removeprefix('sqlite:///')}.gone", NAME)
    broken.notify = told.append
    broken.event(Paired(2, stored.records[2].config, c, 3.0))  # type: ignore[arg-type]
    broken.close()
    assert len(told) == 1 and "optuna-dashboard notes: not written" in told[0].text


def test_a_database_that_stops_answering_skips_notes_without_waiting(pg_server, pg_database, monkeypatch):  # noqa: F811
    """The notes never wait for the database: the study's own storage does (an outage once
    stopped a study after twice $ADVISOR_STORAGE_WAIT, the notes' wait first). A write while
    the server is down is skipped, said once; the next one, the server back, writes."""
    from advisor.outputs.dashboard import DashboardNotes
    from advisor.study.storage import guard

    monkeypatch.setenv("ADVISOR_STORAGE_WAIT", "30")
    study = write_recorded_study(pg_database)
    stored = read_study(study)
    record = next(r for r in stored.records if r.number == 3)
    listener, told, slept = DashboardNotes(pg_database, NAME), [], []
    listener.notify = told.append
    listener.event(Finished(3, record.config, None, 5.0, record))  # type: ignore[arg-type]
    assert told == []
    pg_server.stop()
    # the guard's clock, its sleep recorded (a stand-in, named as such): the wait between its tries
    monkeypatch.setattr(guard, "time", SimpleNamespace(monotonic=time.monotonic, time=time.time, sleep=slept.append))
    try:
        for _ in range(2):
            listener.event(Finished(3, record.config, None, 5.0, record))  # type: ignore[arg-type]
    finally:
        monkeypatch.undo()
        pg_server.start()
    assert slept == [] and listener.active
    assert len(told) == 1 and "notes: skipped while the storage does not answer" in told[0].text
    listener.close()  # the server back: every note written
    assert len(told) == 1
    from advisor.outputs.dashboard import note_api

    attrs = study._storage.get_study_system_attrs(study._study_id)
    trial_1 = study.get_trials(deepcopy=False)[1]._trial_id
    assert "advisor" in note_api().get_note_from_system_attrs(attrs, trial_1)["body"]


def test_other_optuna_studies_in_the_storage_are_left_alone(url, capsys):
    import optuna

    other = optuna.create_study(storage=url, study_name="someone-elses")
    other.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    assert exit_status(["dashboard", "--storage", url, "--no-serve"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"notes: study {NAME}: 11 notes written, 0 unchanged",
                                                    "notes: study someone-elses: not an advisor study, left alone"]
    assert not other._storage.get_study_system_attrs(other._study_id)  # no note, no key


def test_a_study_writes_its_notes_without_loading_the_dashboard_app(url):
    """A running study's notes take optuna-dashboard's note module alone: its package would
    load the web app and, through Optuna's importance code, scikit-learn (about a second of
    every study's start). Run in a fresh interpreter; the notes it writes are the ones the
    dashboard's own API then serves."""
    code = f"""
import sys
from advisor.core.events import Finished
from advisor.core.stored import read_study
from advisor.outputs.dashboard import DashboardNotes
from advisor.study.storage import stores as st
listener = DashboardNotes({url!r}, {NAME!r})
record = next(r for r in read_study(st.load(st.open_storage({url!r}, must_exist=True), {NAME!r})).records
              if r.number == 1)
listener.event(Finished(1, record.config, None, 5.0, record))
listener.close()
print(sorted(m for m in sys.modules if m.split(".")[0] in ("optuna_dashboard", "sklearn", "bottle")))
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() == "[]"
    _, notes, study_note = served(url)
    assert "advisor" in notes[1] and "on the Pareto front" in notes[1] and study_note
