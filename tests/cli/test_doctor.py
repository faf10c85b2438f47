"""`advisor doctor`, run for real: every option this machine offers on the built-in tiny
model, each in a fresh trial process (real Ray, real torch), the table and --json, the
verdicts stored for this machine and what they do to `advisor tune`; bad input is exit
status 2 with nothing written."""

from __future__ import annotations

import json
import os
import re
import stat
import time

import pytest

from advisor.machine.doctor_store import read_verdicts, store_path
from advisor.machine.hardware import detect, fingerprint
from advisor.study.doctor.offered import plan_options
from advisor.study.options.tune_options import TuneOptions
from advisor.study.run.plan import plan_study

from conftest import EXAMPLES, QUICK, WORKLOADS, exit_status, write_model

REFUSES = str(WORKLOADS / "refuses_micro_batches.py")


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("ADVISOR_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def doctor_json(capsys, *args):
    code = exit_status(["doctor", "--json", *args])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


@pytest.mark.ray
def test_every_offered_option_runs_on_the_builtin_model(ray_session, home, capsys):
    """The whole doctor, as a user runs it: each option the capability table offers is
    run (or says why not), in a trial process of its own, and on this CPU every one works."""
    hw = detect()
    t = time.perf_counter()
    report = doctor_json(capsys)
    wall = time.perf_counter() - t
    (model,) = report["models"]
    assert model["model"] == "built-in" and model["sha256"] is None and not model["problem"]
    rows = {(o["knob"], json.dumps(o["value"])): o for o in model["options"]}
    expected = plan_options(hw, hw_base(), {})
    assert set(rows) == {(o.knob, json.dumps(o.value)) for o in expected}
    ran = [o for o in model["options"] if o["status"] != "not run"]
    assert len(ran) >= 10
    for o in ran:
        assert o["status"] in ("works", "fails", "timeout", "not judged")
        if o["status"] == "works":
            assert o["throughput_ratio"] > 0 and o["memory_ratio"] > 0
    assert report["timing_tolerance"] == float(QUICK["ADVISOR_TIMING_TOLERANCE"])  # the suite's, as tune reads it
    refs = model["references"]["train"]
    assert len(refs) == 3 and all(r["ok"] for r in refs)  # before, halfway through and after the options
    pids = {r["pid"] for r in refs} | {o["pid"] for o in ran}
    assert len(pids) >= len({json.dumps(o["run"]) for o in ran}) and os.getpid() not in pids  # a process each
    if hw.device == "cpu":  # the tiny model is built for every CPU knob
        assert [o for o in ran if o["status"] != "works"] == []
        # under two minutes on this 2-core machine when it is otherwise idle; the bound here only
        # catches runs that hang until their timeout (the suite often shares the machine)
        assert wall < 600, f"advisor doctor took {wall:.0f} s"
    stored = store_path(fingerprint(hw))
    assert report["store"] == str(stored) and report["saved"] and stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert {(v.knob, json.dumps(v.value)) for v in read_verdicts(fingerprint(hw))} == {
        (o["knob"], json.dumps(o["value"])) for o in ran}


def hw_base():
    from advisor.core.config import TrialConfig
    from advisor.workload import doctor_model

    return TrialConfig.from_dict(doctor_model.BASELINE)


@pytest.mark.ray
def test_the_table_names_each_option_and_its_ratios(ray_session, home, capsys):
    code = exit_status(["doctor", "--knob", "grad_accumulation", "--knob", "comm_hook"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "the built-in tiny model: each option alone" in out
    for line in ("grad_accumulation=2", "grad_accumulation=4"):
        row = next(r for r in out.splitlines() if r.startswith("│ " + line + " "))
        assert "│ works" in row and len(re.findall(r"\d\.\d\dx", row)) == 2, row  # speed and memory ratios
    assert "run       built-in  reference (train)" in out and "reference (train) again" in out
    assert f"stored:   {store_path(fingerprint(detect()))}" in out
    if detect().device == "cpu" and detect().cpu.cores >= 2:
        row = next(r for r in out.splitlines() if r.startswith('│ comm_hook="fp16"'))
        assert 'parallelism="ddp" devices=2' in row  # run with what it needs


@pytest.mark.ray
def test_a_failure_on_the_users_model_is_recorded_and_dropped_from_tune(ray_session, home, capsys):
    report = doctor_json(capsys, REFUSES, "--knob", "grad_accumulation")
    builtin, user = report["models"]
    assert builtin["model"] == "built-in" and all(o["status"] == "works" for o in builtin["options"])
    assert user["model"] == REFUSES and user["sha256"]
    status = {o["value"]: o for o in user["options"]}
    assert status[2]["status"] == "works" and status[8]["status"] == "works"
    assert status[4]["status"] == "fails" and status[4]["failure_class"] == "error"
    assert status[4]["error"] == "RuntimeError: this model refuses micro-batches of 16 samples"
    plan = plan_study(TuneOptions(workload_path=REFUSES, space="default"))
    grad = next(k for k in plan.space.knobs if k.name == "grad_accumulation")
    assert grad.choices == (1, 2)
    (reason,) = [d.reason for d in plan.space.dropped if d.knob == "grad_accumulation"]
    assert reason == ("failed advisor doctor on this machine (refuses_micro_batches.py: "
                      "RuntimeError: this model refuses micro-batches of 16 samples)")
    ignored = plan_study(TuneOptions(workload_path=REFUSES, space="default", ignore_doctor=True))
    assert next(k for k in ignored.space.knobs if k.name == "grad_accumulation").choices == (1, 2, 4)
    other = plan_study(TuneOptions(workload_path=str(EXAMPLES / "digits_mlp.py"), space="default"))
    assert next(k for k in other.space.knobs if k.name == "grad_accumulation").choices == (1, 2, 4)


@pytest.mark.ray
def test_no_save_stores_nothing(ray_session, home, capsys):
    report = doctor_json(capsys, "--knob", "grad_accumulation", "--no-save", "--timing-tolerance", "0.1")
    assert report["saved"] is False and not home.exists()
    assert report["timing_tolerance"] == 0.1  # the flag over $ADVISOR_TIMING_TOLERANCE


@pytest.mark.ray
def test_an_interrupted_doctor_reports_and_stores_what_ran(ray_session, home, capsys, monkeypatch):
    """Seen on the H100: stopped at its limit after 38 options, the doctor printed nothing
    to --json. Ctrl-C (a KeyboardInterrupt raised as the fifth run ends, the third option's,
    after the reference, two options and the reference again: the stand-in for SIGINT, whose
    run is lost as a real one's would be) now ends it with exit status 130 and the findings so far: what ran, stored;
    what did not, "not run"."""
    from advisor.cli import doctor

    seen = []
    real = doctor._progress

    def interrupt_at_the_fifth(*run, **kwargs):
        real(*run, **kwargs)
        seen.append(run[1])
        if len(seen) == 5:
            raise KeyboardInterrupt

    monkeypatch.setattr(doctor, "_progress", interrupt_at_the_fifth)
    code = exit_status(["doctor", "--json", "--knob", "grad_accumulation"])
    out = capsys.readouterr()
    assert code == 130, out.err
    assert "advisor doctor: interrupted after 2 of 3 option(s)" in out.err
    report = json.loads(out.out)
    assert report["interrupted"] is True
    rows = report["models"][0]["options"]
    assert [r["status"] for r in rows].count("works") == 2
    assert [r["note"] for r in rows if r["status"] == "not run"] == ["not run: the doctor was interrupted first"]
    stored = read_verdicts(fingerprint(detect()))
    assert len(stored) == 2 and all(v.status == "works" for v in stored)


BAD = [
    ("unknown-knob", ["--knob", "turbo"], "--knob 'turbo': unknown knob"),
    ("misspelt-knob", ["--knob", "precison"], "--knob 'precison': unknown knob (did you mean 'precision'? known:"),
    ("timeout-zero", ["--trial-timeout", "0"], "--trial-timeout must be a positive number"),
    ("tolerance-whole", ["--timing-tolerance", "1.5"],
     "--timing-tolerance must be a fraction between 0 and 1 (0.05: +-5%), found 1.5"),
    ("tolerance-env", ["ADVISOR_TIMING_TOLERANCE=fast"],
     "$ADVISOR_TIMING_TOLERANCE is 'fast', expected a fraction such as 0.05 (+-5%)"),
    ("bad-flag", ["--fast"], "unrecognized arguments"),
    ("model-missing", ["no-such-model.py"], "no such file"),
    ("model-contract", ["broken.py"], "datasets() is missing"),
    ("model-forward", ["raises.py"], "the model's forward"),
    ("bad-baseline", ["bad_baseline.py"], "BASELINE"),
]


@pytest.mark.parametrize("row", BAD, ids=[r[0] for r in BAD])
def test_bad_input_is_exit_2_with_nothing_written(row, home, tmp_path, monkeypatch, capsys):
    _, args, text = row
    for variable, value in (a.split("=", 1) for a in args if not a.startswith("-") and "=" in a):
        monkeypatch.setenv(variable, value)
    args = [a for a in args if a.startswith("-") or "=" not in a]
    monkeypatch.chdir(tmp_path)
    write_model(tmp_path, "import torch\ndef model():\n    return torch.nn.Linear(2, 2)\n", "broken.py")
    write_model(tmp_path, (WORKLOADS / "refuses_micro_batches.py").read_text().replace(
        "        return self.body(x)", "        raise ValueError('no forward today')"), "raises.py")
    write_model(tmp_path, (WORKLOADS / "refuses_micro_batches.py").read_text().replace(
        'BASELINE = {"batch_size": 64}', 'BASELINE = {"batch_size": 64, "comm_hook": "fp16"}'), "bad_baseline.py")
    before = sorted(p.name for p in tmp_path.iterdir())
    code = exit_status(["doctor", *args])
    err = capsys.readouterr().err
    assert code == 2, err
    assert text in err, err
    assert not home.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_help_ends_with_examples(capsys):
    from advisor.cli.main import main

    with pytest.raises(SystemExit):
        main(["doctor", "--help"])
    out = capsys.readouterr().out.rstrip()
    assert "examples:" in out and out.splitlines()[-1].strip().startswith("advisor doctor")


@pytest.mark.ray
def test_a_model_frozen_for_serving_is_examined_for_inference_only(ray_session, home, capsys, tmp_path):
    """A review's `advisor doctor` on a model frozen for serving was refused ("measured with
    --workload inference"): its options run for inference now, training-only ones say why not."""
    from tests.workload.test_contract import FROZEN

    frozen = str(write_model(tmp_path, FROZEN, "frozen.py"))
    report = doctor_json(capsys, frozen, "--knob", "grad_accumulation", "--knob", "threads", "--no-save")
    builtin, user = report["models"]
    assert {o["workload"] for o in builtin["options"] if o["knob"] == "grad_accumulation"} == {"train"}
    assert user["model"] == frozen and not user["problem"]
    options = {o["knob"]: o for o in user["options"]}
    assert options["threads"]["workload"] == "inference" and options["threads"]["status"] == "works"
    assert options["grad_accumulation"]["status"] == "not run"
    assert "a training option, and this model is frozen for serving" in options["grad_accumulation"]["note"]
