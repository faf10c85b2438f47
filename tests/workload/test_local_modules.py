"""advisor/workload/local_modules.py and the resume check built on it: a study resumes only
with the model it measured, helper modules beside model.py and what model() builds
included (a user widened a layer in a helper, resumed, and saw the new model ranked
against the old baseline)."""

from __future__ import annotations

import json

import optuna
import pytest

from advisor.core.errors import StudyError
from advisor.study.options.tune_options import TuneOptions
from advisor.study.run.plan import open_study, plan_study
from advisor.study.storage.stores import open_storage
from advisor.workload.local_modules import imported_names, local_modules

MODEL = '''import json
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import TensorDataset

from blocks import block

BASELINE = {"batch_size": 16}


def model():
    from shapes import dtype, width  # imported where it is used: counts too
    return nn.Sequential(block(4, width()), nn.Linear(width(), 3)).to(getattr(torch, dtype()))


def datasets():
    from shapes import dtype
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(96, 4, generator=g).to(getattr(torch, dtype())), torch.randint(0, 3, (96,), generator=g)
    return TensorDataset(x[:64], y[:64]), TensorDataset(x[64:], y[64:])
'''
BLOCKS = """from torch import nn


def block(i, o):
    return nn.Sequential(nn.Linear(i, o), nn.ReLU())
"""
SHAPES = """import json
from pathlib import Path


def width():
    return json.loads((Path(__file__).parent / "shape.json").read_text())["width"]


def dtype():
    return json.loads((Path(__file__).parent / "shape.json").read_text()).get("dtype", "float32")
"""


@pytest.fixture
def project(tmp_path):
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "blocks.py").write_text(BLOCKS)
    (tmp_path / "shapes.py").write_text(SHAPES)
    (tmp_path / "shape.json").write_text(json.dumps({"width": 8}))
    return tmp_path


def test_the_modules_beside_model_py_that_it_imports_directly_or_in_turn(tmp_path):
    assert imported_names("import torch, a.b\nfrom c.d import e\nfrom . import f\ndef g():\n    import h\n") == [
        "torch", "a.b", "c.d", "h"]
    assert imported_names("def broken(:\n") == []
    (tmp_path / "model.py").write_text("import helper\nimport pkg.sub\nimport torch\nimport unused_here\n")
    (tmp_path / "helper.py").write_text("import deeper\n")
    (tmp_path / "deeper.py").write_text("X = 1\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "sub.py").write_text("Y = 2\n")
    (tmp_path / "not_imported.py").write_text("Z = 3\n")
    (tmp_path / "torch").mkdir()  # a folder of data that happens to share a library's name: no .py in it
    (tmp_path / "torch" / "weights.bin").write_bytes(b"\0")
    found = local_modules(tmp_path / "model.py", (tmp_path / "model.py").read_text())
    assert sorted(found) == ["deeper.py", "helper.py", "pkg/__init__.py", "pkg/sub.py"]
    assert all(len(h) == 64 for h in found.values())
    (tmp_path / "deeper.py").write_text("X = 2\n")  # a module two imports away changed
    again = local_modules(tmp_path / "model.py", (tmp_path / "model.py").read_text())
    assert [k for k in found if found[k] != again[k]] == ["deeper.py"]


def test_an_environment_inside_the_project_folder_is_not_the_model(tmp_path):
    venv = tmp_path / ".venv" / "lib" / "python3.11" / "site-packages"
    venv.mkdir(parents=True)
    (venv / "helper.py").write_text("X = 1\n")
    (tmp_path / "model.py").write_text("import helper\nimport proj\n")
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "__init__.py").write_text("")
    (tmp_path / "proj" / ".cache").mkdir()
    (tmp_path / "proj" / ".cache" / "x.py").write_text("")
    (tmp_path / "proj" / "site-packages").mkdir()
    (tmp_path / "proj" / "site-packages" / "y.py").write_text("")
    assert sorted(local_modules(tmp_path / "model.py", "import helper\nimport proj\n")) == ["proj/__init__.py"]
    assert local_modules(venv / "model.py", "import helper\n") == {}  # a model.py installed as a library


def _plan(folder):
    return plan_study(TuneOptions(workload_path=str(folder / "model.py"), space="quick", train_samples=64,
                                  storage=f"sqlite:///{folder / 's.db'}"))


def test_a_study_resumes_only_with_the_helpers_and_the_model_it_measured(project):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    first = _plan(project)
    attrs = first.study_attrs()
    assert sorted(attrs["workload_modules"]) == ["blocks.py", "shapes.py"] and attrs["workload_parameters"] == 67
    open_study(first, open_storage(first.storage_url))
    open_study(_plan(project), open_storage(first.storage_url))  # nothing changed: resumes

    (project / "blocks.py").write_text(BLOCKS.replace("nn.ReLU()", "nn.Tanh()"))  # same parameters, other model
    changed = _plan(project)
    with pytest.raises(StudyError, match=r"another setup: the modules beside model.py that it imports: "
                                         r"blocks.py changed; its trials would not be comparable"):
        open_study(changed, open_storage(changed.storage_url))

    (project / "blocks.py").write_text(BLOCKS)
    (project / "shape.json").write_text(json.dumps({"width": 16}))  # no source changed, the model did
    wider = _plan(project)
    with pytest.raises(StudyError, match=r"another setup: the model.s parameters: 67 then, 131 now"):
        open_study(wider, open_storage(wider.storage_url))

    (project / "shape.json").write_text(json.dumps({"width": 8, "dtype": "float64"}))  # as many, in another dtype
    doubled = _plan(project)
    assert doubled.study_attrs()["workload_weights_dtype"] == "float64" and attrs["workload_weights_dtype"] == "float32"
    with pytest.raises(StudyError, match=r"another setup: the model.s weights: float32 then, float64 now"):
        open_study(doubled, open_storage(doubled.storage_url))
