"""Known-failure learning in a real study: once two trials with otherwise different
settings fail with the same error, the configurations with what they share beyond the
baseline are skipped with the reason, and do not count towards --trials."""

from __future__ import annotations

import os

import optuna
import pytest

from advisor.cli.main import main

from conftest import WORKLOADS


@pytest.mark.ray
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="the space's threads=2 needs two cores")
def test_configurations_that_failed_alike_are_skipped_in_a_study(ray_session, workdir, capsys):
    space = workdir / "bs_threads.yaml"
    space.write_text("batch_size: {choices: [32, 128]}\nthreads: {choices: [null, 1, 2]}\n")
    # 6 configurations; the three with batch size 128 raise the same bug (tests/workloads/fails_at_128.py)
    code = main(["tune", str(WORKLOADS / "fails_at_128.py"), "--space", str(space), "--trials", "6",
                 "--sampler", "random", "--seed", "1", "--train-samples", "256", "--no-tui"])
    out = capsys.readouterr().out
    assert code == 0, out
    trials = optuna.load_study(study_name="fails_at_128-bs_threads", storage="sqlite:///advisor.db").get_trials()
    ran = [t for t in trials if "wall_s" in t.user_attrs]
    failed = [t for t in ran if t.state.name == "FAIL"]
    skipped = [t for t in trials if t.user_attrs.get("skipped")]
    # one trial at a time here (a CPU trial takes the node's cores): the third configuration
    # with batch size 128 is proposed after two have failed, whichever order the sampler takes
    assert [t.user_attrs["config"]["batch_size"] for t in failed] == [128, 128]
    assert all(t.user_attrs["failure_class"] == "error" for t in failed)
    assert len(skipped) == 1 and skipped[0].user_attrs["config"]["batch_size"] == 128
    assert skipped[0].number > max(t.number for t in failed)
    first, second = sorted(t.number for t in failed)
    reason = skipped[0].user_attrs["failure_message"]
    assert skipped[0].user_attrs["failure_class"] == "error"
    assert reason.startswith(f"known failure: batch_size=128 failed in trials {first} and {second} with the same "
                             "error: RuntimeError: fused kernel failed for a batch of 128 at call"), reason
    assert len(ran) == 5 and all(t.state.name == "COMPLETE" for t in ran if t not in failed)  # 6 less the skip
    assert f"learned: batch_size=128 failed in trials {first} and {second}" in out
