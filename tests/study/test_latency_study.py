"""--max-latency-ms through a real inference study (Ray, SQLite): every trial measures its
latency, a limit no forward pass can meet makes every trial infeasible with the reason in
its line, and a resumed study must keep the limit it was run with."""

from __future__ import annotations

import json

import optuna
import pytest

from advisor.cli.main import main
from advisor.core.latency import CONSTRAINT
from advisor.core.stored import read_trial

from conftest import EXAMPLES, exit_status

pytestmark = pytest.mark.ray


def test_an_inference_study_under_a_latency_limit(ray_session, workdir, capsys):
    space = workdir / "infer.yaml"
    space.write_text("batch_size: {choices: [64, 32]}\n")
    model = str(EXAMPLES / "digits_inference.py")
    args = ["tune", model, "--workload", "inference", "--space", str(space), "--sampler", "random"]
    code = main([*args, "--trials", "2", "--max-latency-ms", "0.001"])
    out = capsys.readouterr().out
    assert code == 0
    study = optuna.load_study(study_name="digits_inference-infer", storage=f"sqlite:///{workdir / 'advisor.db'}")
    assert study.user_attrs["max_latency_ms"] == 0.001
    done = [t for t in study.get_trials() if t.state.name == "COMPLETE"]
    assert len(done) == 2
    for t in done:
        lat = t.user_attrs["telemetry"]["latency"]
        assert 0 < lat["p50_ms"] <= lat["p95_ms"] <= lat["p99_ms"] and lat["batch1_ms"] > 0
        assert read_trial(t).constraints[CONSTRAINT] > 0 and not read_trial(t).feasible
    assert out.count("over --max-latency-ms 0.001") == 2 and "infeasible: p99 latency" in out

    assert exit_status(["trials", "digits_inference-infer", "--json"]) == 0
    trials = json.loads(capsys.readouterr().out)["trials"]
    assert all(t["latency"]["p99_ms"] > 0 and t["feasible"] is False for t in trials)

    # resumed with another limit: refused before anything runs
    assert main([*args, "--trials", "3", "--max-latency-ms", "5"]) == 2
    err = capsys.readouterr().err
    assert "was run with another setup: --max-latency-ms: 0.001 then, 5.0 now; its trials' verdicts" in err
