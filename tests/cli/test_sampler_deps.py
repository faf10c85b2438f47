"""--sampler and the packages each sampler needs: gp (Optuna's GPSampler) needs scipy, which
is not a dependency (pip install 'advisor[gp]'); without it `advisor tune --sampler gp` is
refused before anything runs. scipy is installed here: its absence is made real for the
test by blocking its import (sys.modules["scipy"] = None makes `import scipy` fail)."""

from __future__ import annotations

import sys

import pytest

from advisor.search.samplers import NEEDS, SAMPLERS, check_sampler, make_sampler

from conftest import EXAMPLES, exit_status


@pytest.fixture
def no_scipy(monkeypatch):
    for name in [m for m in sys.modules if m == "scipy" or m.startswith("scipy.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "scipy", None)
    with pytest.raises(ImportError):
        import scipy  # noqa: F401


def test_gp_without_scipy_is_refused_up_front(no_scipy, workdir, capsys):
    code = exit_status(["tune", str(EXAMPLES / "digits_mlp.py"), "--sampler", "gp", "--trials", "1"])
    out, err = capsys.readouterr()
    assert code == 2, err
    assert "--sampler gp needs scipy, which is not installed" in err
    assert "pip install 'advisor[gp]'" in err and "choose another sampler (default, tpe, nsga2, random)" in err
    assert out == "" and list(workdir.iterdir()) == []  # nothing planned, nothing written


def test_gp_with_scipy_is_accepted_and_built():
    pytest.importorskip("scipy")
    import optuna

    assert check_sampler("gp") == "gp"
    assert isinstance(make_sampler("gp", 0), optuna.samplers.GPSampler)


def test_gp_says_nothing_of_the_knobs_a_condition_leaves_out(capsys):
    """A knob that only some trials have (pp_schedule under pp) is sampled apart from the
    GP; Optuna's warning of it, with Optuna's trial numbers, reached a review's stderr."""
    pytest.importorskip("scipy")
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=make_sampler("gp", 0), directions=["maximize"])

    def objective(trial):
        kind = trial.suggest_categorical("parallelism", ["single", "pp"])
        x = trial.suggest_float("x", 0, 1)
        if kind == "pp":
            x += trial.suggest_categorical("pp_schedule", ["1f1b", "gpipe"]) == "gpipe"
        return x

    study.optimize(objective, n_trials=11)
    assert "independently" not in capsys.readouterr().err


@pytest.mark.parametrize("name", [s for s in SAMPLERS if s not in NEEDS])
def test_every_other_sampler_needs_nothing_optional(name, no_scipy):
    """Each runs a study like advisor's (three objectives, a constraint) with scipy absent."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = make_sampler(check_sampler(name), 0)
    study = optuna.create_study(directions=["maximize", "minimize", "maximize"], sampler=sampler)

    def objective(trial):
        bs = trial.suggest_categorical("batch_size", [16, 32, 64, 128])
        precision = trial.suggest_categorical("precision", ["fp32", "bf16"])
        trial.set_constraint("memory_cap", float(bs > 64))  # as advisor.search.strategy records limits
        return bs * (2 if precision == "bf16" else 1), bs / 16, 1.0 - bs / 1000

    study.optimize(objective, n_trials=12)
    assert len(study.trials) == 12 and "scipy" not in {m.partition(".")[0] for m in sys.modules if sys.modules[m]}
