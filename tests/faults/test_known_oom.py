"""Known-OOM learning: configurations that need at least as much memory as one that ran
out are skipped with the reason, and do not count towards --trials."""

from __future__ import annotations

import optuna
import pytest

from advisor.cli.main import main
from advisor.core.config import TrialConfig
from advisor.search.known_oom import KnownOom

from conftest import WORKLOADS


def test_rule_same_settings_larger_batch():
    known = KnownOom()
    known.add(3, TrialConfig(batch_size=128, precision="bf16"))
    assert "trial 3" in known.reason(TrialConfig(batch_size=128, precision="bf16"))
    assert "batch size 256" in known.reason(TrialConfig(batch_size=256, precision="bf16"))
    assert known.reason(TrialConfig(batch_size=64, precision="bf16")) is None       # smaller: may fit
    assert known.reason(TrialConfig(batch_size=256, precision="fp32")) is None      # other settings
    assert known.reason(TrialConfig(batch_size=256, precision="bf16", grad_accumulation=4)) is None


@pytest.mark.ray
def test_known_oom_configurations_are_skipped_in_a_study(ray_session, workdir, capsys):
    space = workdir / "bs.yaml"
    space.write_text("batch_size: {choices: [32, 64, 128, 256, 512]}\n")
    # seed 1: the random sampler proposes batch 64 before some larger sizes (checked below)
    code = main(["tune", str(WORKLOADS / "oom_above.py"), "--space", str(space), "--trials", "5",
                 "--sampler", "random", "--seed", "1", "--train-samples", "256"])
    out = capsys.readouterr().out
    assert code == 0
    trials = optuna.load_study(study_name="oom_above-bs", storage="sqlite:///advisor.db").get_trials()
    ran = {t.user_attrs["config"]["batch_size"]: t for t in trials if "wall_s" in t.user_attrs}
    skipped = [t for t in trials if t.user_attrs.get("skipped")]
    assert ran[32].state.name == "COMPLETE"
    assert all(t.user_attrs["failure_class"] == "oom" for bs, t in ran.items() if bs >= 64)
    assert skipped, "seed 1 proposes a batch size above one that already ran out"
    first_oom = min(t.number for bs, t in ran.items() if bs >= 64)
    for t in skipped:
        bs = t.user_attrs["config"]["batch_size"]
        assert t.user_attrs["failure_class"] == "oom" and bs not in ran
        assert "known to run out of memory" in t.user_attrs["failure_message"]
        assert t.number > first_oom
    assert len(ran) + len(skipped) == 5  # every configuration answered once
    assert f"{len(skipped)} skipped as known to run out of memory" in out
