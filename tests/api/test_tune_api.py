"""advisor.tune() from Python: callables as the model.py contract (checked importable up
front), a model.py path, options by keyword, and the result: front, picks, export. Real
Ray, real SQLite, real trials."""

from __future__ import annotations

import sys
import types

import pytest

import advisor
from advisor.api.callables import workload_source
from advisor.core.errors import StudyError, WorkloadError

from conftest import EXAMPLES

USER_MODULE = '''
import torch
from torch.utils.data import TensorDataset

def make_model():
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))

def make_data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(384, 8, generator=g)
    y = (x[:, 0] + x[:, 1] > 0).long()
    return TensorDataset(x[:256], y[:256]), TensorDataset(x[256:], y[256:])

def sgd(parameters):
    return torch.optim.SGD(parameters, lr=0.1)
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """A module of the user's, importable from its own directory (as next to a notebook)."""
    home = tmp_path / "project"
    home.mkdir()
    (home / "my_models_api.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(home))
    sys.modules.pop("my_models_api", None)
    import my_models_api

    yield my_models_api
    sys.modules.pop("my_models_api", None)


def _in_main():
    def f():
        return None
    f.__module__, f.__qualname__ = "__main__", "f"
    return f


def _nested():
    def inner():
        return None
    return inner


@pytest.mark.parametrize("pieces,expected", [
    (lambda m: dict(model=lambda: None, datasets=m.make_data), "a lambda cannot be imported by a trial process"),
    (lambda m: dict(model=_nested(), datasets=m.make_data), "is defined inside a function"),
    (lambda m: dict(model=_in_main(), datasets=m.make_data), "defined in the script or notebook being run (__main__)"),
    (lambda m: dict(model=m.make_model, datasets=m.make_data, optimizer=3), "optimizer=...): expected a function"),
    (lambda m: dict(model=m.make_model), "datasets is required"),
    (lambda m: dict(model=str(EXAMPLES / "digits_mlp.py"), datasets=m.make_data), "a model.py path brings its own"),
    (lambda m: dict(model=m.make_model, datasets=m.make_data, baseline=64), "expected a dict"),
], ids=["lambda", "nested", "main", "not-callable", "no-datasets", "path-and-callables", "bad-baseline"])
def test_what_a_trial_process_could_not_import_is_refused_before_anything_runs(workdir, user_module, pieces,
                                                                                 expected):
    with pytest.raises(WorkloadError) as info:
        advisor.tune(**pieces(user_module), trials=1)
    assert expected in str(info.value)
    if "import" in expected or "inside" in expected:  # says what to do instead
        assert "define it at the top level of a module file" in str(info.value)
    assert not (workdir / "advisor.db").exists() and not (workdir / ".advisor").exists()


def test_a_refused_baseline_names_the_argument_and_leaves_no_file(workdir, user_module):
    """A review's bad baseline= was reported against a generated file
    (.advisor/model-725f130e.py: BASELINE ...), and each refused call left one behind."""
    from advisor.core.errors import AdvisorError

    for bad, expected in (({"batch_size": 0}, "advisor.tune(baseline=...)"),
                          ({"precision": "fp64"}, "advisor.tune(baseline=...)")):
        with pytest.raises(AdvisorError) as info:
            advisor.tune(user_module.make_model, user_module.make_data, baseline=bad, trials=1)
        assert expected in str(info.value) and ".advisor" not in str(info.value), str(info.value)
    assert not list((workdir / ".advisor").glob("*.py")) and not (workdir / "advisor.db").exists()
    # refused later (a space, a tracker: a review found the file left by those): nothing, not even the folder
    for bad, expected in (({"space": "nope"}, "search space nope is invalid"),
                          ({"log_to": ["nosuch"]}, "unknown tracker 'nosuch'")):
        with pytest.raises(AdvisorError, match=expected):
            advisor.tune(user_module.make_model, user_module.make_data, trials=1, **bad)
        assert sorted(p.name for p in workdir.iterdir()) == ["project"]  # the user's module alone


def test_options_are_named_as_arguments(workdir, user_module):
    with pytest.raises(StudyError, match="trials= must be at least 1"):
        advisor.tune(user_module.make_model, user_module.make_data, trials=0)
    for given, expected in (({"trials": "4"}, "trials= must be a whole number, found str '4'"),  # not a TypeError
                            ({"train_samples": 1.5}, "train_samples= must be a whole number, found float 1.5"),
                            ({"timeout": "soon"}, "timeout= must be a number, found str 'soon'")):
        with pytest.raises(StudyError, match=expected):
            advisor.tune(user_module.make_model, user_module.make_data, **given)
    typo = "expected a function or class, or \"output.loss\" .*found str 'output.los'"
    with pytest.raises(WorkloadError, match=typo):
        advisor.tune(user_module.make_model, user_module.make_data, loss="output.los")
    assert not (workdir / "advisor.db").exists()


def test_the_written_model_py_imports_the_callables_from_where_they_live(user_module):
    text = workload_source({"model": user_module.make_model, "datasets": user_module.make_data,
                            "optimizer": user_module.sgd, "loss": "output.loss"}, {"batch_size": 32})
    assert "from my_models_api import make_model as model" in text
    assert "from my_models_api import sgd as optimizer" in text
    assert 'LOSS = "output.loss"' in text and "BASELINE = {'batch_size': 32}" in text
    assert str(sys.modules["my_models_api"].__file__).rsplit("/", 1)[0] in text  # its directory joins sys.path
    fresh = types.ModuleType("fresh")
    sys.modules.pop("my_models_api")
    exec(compile(text, "written.py", "exec"), fresh.__dict__)  # imports them again, as a trial process would
    assert callable(fresh.model) and callable(fresh.datasets)


@pytest.mark.ray
def test_tune_from_python_returns_the_front_picks_and_exports(ray_session, workdir, user_module, capsys):
    result = advisor.tune(user_module.make_model, user_module.make_data, optimizer=user_module.sgd,
                          baseline={"batch_size": 32}, space="eager", trials=3, train_samples=512,
                          confirm=False, metric_seeds=1)  # both tested on their own (tests/study)
    out = capsys.readouterr().out
    assert "Pareto front" in out and "trial   0" in out  # progress and summary, as the command prints them
    assert result.study_name == "make_model-eager" and result.stop_reason is None
    assert result.counts["trials"] == 3
    assert result.front and result.front[0]["trial"] == 0 and result.front[0]["baseline"]
    assert set(result.picks) == {"fastest", "smallest", "best-metric", "balanced"}
    written = list((workdir / ".advisor").glob("make_model-*.py"))
    assert len(written) == 1 and result.workload_path == str(written[0])
    text = result.export(workdir / "best.yaml", pick="fastest")
    assert (workdir / "best.yaml").read_text() == text
    config = advisor.load_config(workdir / "best.yaml")
    assert config.to_dict() == result.config("fastest")
    prepared = advisor.apply(user_module.make_model(), config)
    assert prepared.module is not None
    again = advisor.tune(user_module.make_model, user_module.make_data, optimizer=user_module.sgd,
                         baseline={"batch_size": 32}, space="eager", trials=3, train_samples=512, progress=False,
                         confirm=False, metric_seeds=1)
    assert again.counts["trials"] == 3  # the same callables resume the same study: nothing more to run
    assert capsys.readouterr().out == ""
