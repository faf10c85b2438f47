"""The model.py contract: each violation is a clear message, exit status 2, and no study."""

from __future__ import annotations

import pytest

from advisor.cli.main import main
from advisor.core.errors import WorkloadError
from advisor.workload.contract import load_workload
from advisor.workload.preflight import preflight

from conftest import EXAMPLES, WORKLOADS, write_model

GOOD_DATA = """
import torch
from torch.utils.data import TensorDataset
def datasets():
    x = torch.randn(64, 4); y = torch.randint(0, 2, (64,))
    return TensorDataset(x, y), TensorDataset(x, y)
"""
GOOD_MODEL = """
def model():
    return torch.nn.Linear(4, 2)
"""

MLP = """
def model():
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
"""

# (id, model.py text, what the message must say)
VIOLATIONS = [
    ("syntax", "def model(:\n", "not valid Python"),
    ("syntax-shows-its-line", "import torch\ndef model():\n    return torch.nn.Linear(4 2)\n",
     "model.py:3: not valid Python: invalid syntax. Perhaps you forgot a comma? (expected a model.py with model() "
     "and datasets())\n    return torch.nn.Linear(4 2)\n                           ^"),
    ("model-returns-its-class", GOOD_DATA + "class Net(torch.nn.Linear):\n    pass\ndef model():\n    return Net\n",
     "found the class Net itself: return Net(...), an instance"),
    ("not-python", "\x00\x01binary garbage ]]]\n", "not valid Python"),
    ("import-error", "import not_a_module_anywhere\n", "ModuleNotFoundError"),
    ("relative-import", "from .nets import Net\n", "attempted relative import with no known parent package (advisor "
     "imports model.py as a file of its own, not as part of a package: import what is beside it by its own name, "
     "`from nets import Net`, or a package by its full name)"),
    ("raises-on-import", "raise RuntimeError('boom at import')\n", "boom at import"),
    ("no-model", GOOD_DATA, "model() is missing"),
    ("no-datasets", "import torch\n" + GOOD_MODEL, "datasets() is missing"),
    ("model-not-module", GOOD_DATA + "def model():\n    return 42\n", "must return a torch.nn.Module, found int"),
    ("model-no-params", GOOD_DATA + "def model():\n    return torch.nn.ReLU()\n", "no trainable parameters"),
    ("model-frozen", GOOD_DATA + "def model():\n    return torch.nn.Linear(4, 2).requires_grad_(False)\n",
     "no trainable parameters (requires_grad is False for every one); expected a model to train"),
    ("model-raises", GOOD_DATA + "def model():\n    raise ValueError('bad init')\n", "model() raised ValueError: bad init"),
    ("datasets-single", "import torch\n" + GOOD_MODEL + "def datasets():\n    return [1, 2, 3]\n",
     "must return (train, validation)"),
    ("datasets-not-dataset", "import torch\n" + GOOD_MODEL + "def datasets():\n    return 1, 2\n",
     "map-style Dataset"),
    ("empty-train", "import torch\nfrom torch.utils.data import TensorDataset\n" + GOOD_MODEL +
     "def datasets():\n    e = TensorDataset(torch.zeros(0, 4), torch.zeros(0))\n    return e, e\n", "train dataset is empty"),
    ("empty-validation", "import torch\nfrom torch.utils.data import TensorDataset\n" + GOOD_MODEL +
     "def datasets():\n    x = TensorDataset(torch.zeros(4, 4), torch.zeros(4, dtype=torch.long))\n"
     "    return x, TensorDataset(torch.zeros(0, 4), torch.zeros(0))\n", "validation dataset is empty"),
    ("item-not-pair", "import torch\n" + GOOD_MODEL + "def datasets():\n    d = [torch.zeros(4)] * 4\n    return d, d\n",
     "must be an (input, target) pair"),
    ("inconsistent-shapes", "import torch\n" + GOOD_MODEL +
     "def datasets():\n    d = [(torch.zeros(4), 0), (torch.zeros(5), 1)]\n    return d, d\n", "inconsistent shapes"),
    ("shapes-differ-later", "import torch\n" + GOOD_MODEL +  # the first two alike: a batch of 64 still fails
     "def datasets():\n    d = [(torch.zeros(4 if i < 5 else 5), 0) for i in range(40)]\n    return d, d\n",
     "training items differ in shape: item 0 is ([4], 0), item 5 is ([5], 0)"),
    ("getitem-raises-later", "import torch\n" + GOOD_MODEL +  # was advisor's own traceback and exit 1
     "class D(torch.utils.data.Dataset):\n    def __len__(self):\n        return 40\n"
     "    def __getitem__(self, i):\n        if i >= 10:\n            raise ValueError(f'corrupt record {i}')\n"
     "        return torch.zeros(4), 0\ndef datasets():\n    return D(), D()\n",
     "datasets(): the training set, reading its items by index, raised ValueError: corrupt record 10"),
    ("forward-raises", GOOD_DATA + "def model():\n    return torch.nn.Linear(3, 2)\n",
     "the model's forward, on a batch of 2 training samples, raised RuntimeError"),
    ("loss-not-scalar", GOOD_DATA + GOOD_MODEL + "def loss(o, t):\n    return o.sum(1)\n", "must return a scalar tensor"),
    ("loss-no-grad", GOOD_DATA + GOOD_MODEL + "def loss(o, t):\n    return torch.tensor(1.0)\n", "does not require grad"),
    ("metric-not-number", GOOD_DATA + GOOD_MODEL + "def metric(o, t):\n    return 'high'\n", "must return a number, found str"),
    ("metric-nan", GOOD_DATA + GOOD_MODEL + "def metric(o, t):\n    return float('nan')\n", "expected a finite number"),
    ("optimizer-wrong", GOOD_DATA + GOOD_MODEL + "def optimizer(p):\n    return None\n", "must return a torch.optim.Optimizer"),
    ("optimizer-with-a-scheduler", GOOD_DATA + GOOD_MODEL + "def optimizer(p):\n    o = torch.optim.SGD(p, lr=0.1)\n"
     "    return o, torch.optim.lr_scheduler.StepLR(o, 10)\n",
     "optimizer() must return a torch.optim.Optimizer, found tuple holding one: return the optimizer alone"),
    ("optimizer-given-the-model", GOOD_DATA + GOOD_MODEL + "def optimizer(model):\n"
     "    return torch.optim.SGD(model.parameters(), lr=0.1)\n",
     "(optimizer(parameters) is given model.parameters(), a generator of the tensors to train, not the model)"),
    ("loss-not-callable", GOOD_DATA + GOOD_MODEL + "loss = 3\n", "loss must be a function"),
    ("exit-at-import", "import sys\nsys.exit(3)\n", "importing it called sys.exit(3): model.py must not end the process"),
    ("exit-in-datasets", "import sys, torch\n" + GOOD_MODEL + "def datasets():\n    sys.exit('no data')\n",
     "datasets() called sys.exit('no data')"),
    ("interrupt-in-model", GOOD_DATA + "def model():\n    raise KeyboardInterrupt\n",
     "model() raised KeyboardInterrupt itself (not a Ctrl-C)"),
    ("exit-in-forward", GOOD_DATA + "class M(torch.nn.Linear):\n    def forward(self, x):\n        raise SystemExit\n"
     "def model():\n    return M(4, 2)\n", "the model's forward, on a batch of 2 training samples, called sys.exit()"),
    ("exit-in-item", "import sys, torch\n" + GOOD_MODEL + "class D:\n    def __len__(self):\n        return 4\n"
     "    def __getitem__(self, i):\n        sys.exit(1)\ndef datasets():\n    return D(), D()\n",
     "datasets(): train[0] called sys.exit(1)"),
    ("metric-unknown-key", GOOD_DATA + GOOD_MODEL + "METRIC = {'name': 'f1', 'higher': True}\n",
     "METRIC: unknown key(s) 'higher'"),
    ("metric-bad-direction", GOOD_DATA + GOOD_MODEL + "METRIC = {'name': 'ppl', 'higher_is_better': 'lower'}\n",
     "METRIC['higher_is_better'] must be a bool"),
    ("baseline-not-dict", GOOD_DATA + GOOD_MODEL + "BASELINE = 64\n", "BASELINE must be a dict"),
    ("baseline-unknown-key", GOOD_DATA + GOOD_MODEL + "BASELINE = {'batchsize': 64}\n", "batchsize: unknown key"),
    ("baseline-bad-value", GOOD_DATA + GOOD_MODEL + "BASELINE = {'batch_size': 0}\n", "expected a positive integer"),
    ("tp-plan-missing-layer", GOOD_DATA + MLP + "def tp_plan():\n    return {'0': 'colwise', '3': 'rowwise'}\n",
     "tp_plan(): the tensor-parallel plan is invalid:\n  - '3' names no submodule; 'the model' has 0, 1, 2"),
    ("tp-plan-bad-style", GOOD_DATA + MLP + "def tp_plan():\n    return {'0': 'sideways', '2': 'rowwise'}\n",
     "'0': unknown style 'sideways'; one of colwise, rowwise"),
    ("tp-plan-not-a-dict", GOOD_DATA + MLP + "def tp_plan():\n    return ['0', '2']\n",
     "tp_plan() must return a non-empty dict of layer name -> style"),
    ("tp-plan-indivisible", GOOD_DATA + "def model():\n    return torch.nn.Sequential(torch.nn.Linear(4, 3), "
     "torch.nn.ReLU(), torch.nn.Linear(3, 2))\ndef tp_plan():\n    return {'0': 'colwise', '2': 'rowwise'}\n",
     "'0': the split dimension (3) does not divide by 2 ranks"),
    ("pipeline-one-stage", GOOD_DATA + MLP + "def pipeline_split():\n    return []\n",
     "pipeline_split() returned no layer name: that is one stage, and a pipeline needs at least 2"),
    ("pipeline-missing-layer", GOOD_DATA + MLP + "def pipeline_split():\n    return ['1', 'layers.4']\n",
     "pipeline_split(): 'layers.4' names no submodule"),
    ("pipeline-not-a-list", GOOD_DATA + MLP + "def pipeline_split():\n    return 2\n",
     "pipeline_split() must return a list of layer names"),
    ("pipeline-not-callable", GOOD_DATA + MLP + "pipeline_split = ['1']\n", "pipeline_split must be a function"),
    # what every trial would fail on, caught here rather than by the baseline trial
    ("loss-nan", GOOD_DATA + GOOD_MODEL + "def loss(o, t):\n    return o.sum() * float('nan')\n",
     "loss() returned nan on a batch of 2 training samples in fp32, before any training step: expected a finite"),
    ("loss-inf", GOOD_DATA + GOOD_MODEL + "def loss(o, t):\n    return o.sum() + float('inf')\n", "returned inf"),
    ("baseline-batch-over-train", GOOD_DATA + GOOD_MODEL + "BASELINE = {'batch_size': 128}\n",
     "BASELINE batch_size 128 is larger than the training set (64 samples from datasets()); expected at most 64"),
    ("baseline-knob-pointless", GOOD_DATA + MLP + "BASELINE = {'batch_size': 16, 'channels_last': True}\n",
     "BASELINE: channels_last=true: the model has no 2-D convolutions, so the memory format changes nothing; "
     "set it to its default (false) or leave it out"),
    ("validation-items-wrong", "import torch\nfrom torch.utils.data import TensorDataset\n" + GOOD_MODEL +
     "def datasets():\n    y = torch.randint(0, 2, (64,))\n"
     "    return TensorDataset(torch.randn(64, 4), y), TensorDataset(torch.randn(16, 5), y[:16])\n",
     "the model's forward, in eval mode, on a batch of 2 validation samples, raised RuntimeError: mat1 and mat2 "
     "shapes cannot be multiplied (2x5 and 4x2) (the training batch passed; "),
    # the defaults (no loss(), no metric()) on a model they cannot read: said as such, not as the user's loss()
    ("default-loss-on-a-tuple", GOOD_DATA + "class Net(torch.nn.Linear):\n    def forward(self, x):\n"
     "        return super().forward(x), x\ndef model():\n    return Net(4, 2)\n",
     "model.py: the default loss (cross entropy: model.py defines no loss()) raised TypeError: the model's output "
     "is a tuple of 2, not class scores"),
    ("default-loss-on-a-dict", GOOD_DATA + "class Net(torch.nn.Linear):\n    def forward(self, x):\n"
     "        return {'scores': super().forward(x)}\ndef model():\n    return Net(4, 2)\n",
     "the model's output is a dict of 1 (keys 'scores', no 'logits')"),
    ("default-metric-on-a-regression", "import torch\nfrom torch.utils.data import TensorDataset\n"
     "def datasets():\n    x = torch.randn(64, 4)\n    return TensorDataset(x, x.sum(1)), TensorDataset(x, x.sum(1))\n"
     "def model():\n    return torch.nn.Sequential(torch.nn.Linear(4, 1), torch.nn.Flatten(0))\n"
     "def loss(o, t):\n    return torch.nn.functional.mse_loss(o, t)\n",
     "model.py: the default metric (accuracy: model.py defines no metric()) raised TypeError: the targets are "
     "float32 values of shape (2,), not class indices"),
    ("datasets-misspelt", GOOD_MODEL.replace("def model", "import torch\ndef model") +
     GOOD_DATA.replace("def datasets", "def dataset"),
     "datasets() is missing (required by the model.py contract) (model.py defines dataset(): did you mean to name "
     "it datasets()?)"),
    ("input-a-list-of-numbers", "import torch\n" + GOOD_MODEL +
     "def datasets():\n    items = [([0.1 * i, 0.2, 0.3, 0.4], i % 2) for i in range(64)]\n    return items, items\n",
     "the model's forward, on a batch of 2 training samples (each item's input is a list of 4 numbers: torch's "
     "default collate makes it 4 tensors, passed as 4 arguments; make it one tensor, torch.tensor(values), or "
     "define collate()), raised TypeError"),
    ("validation-not-batchable", "import torch\nfrom torch.utils.data import TensorDataset\n" + GOOD_MODEL +
     "def datasets():\n    y = torch.randint(0, 2, (64,))\n"
     "    return TensorDataset(torch.randn(64, 4), y), [(torch.zeros(4), 0), (torch.zeros(3), 1)]\n",
     "datasets(): validation items"),
    # DataLoaders: their items are whole batches (a study of one finished with exit status 0 and batches of batches)
    ("train-a-dataloader", "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n" + GOOD_MODEL +
     "def datasets():\n    d = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))\n"
     "    return DataLoader(d, batch_size=32, shuffle=True), d\n",
     "datasets(): the train set is a DataLoader (batches of 32); expected the dataset it reads, whose items are "
     "single (input, target) samples: return loader.dataset (here TensorDataset) instead"),
    ("validation-a-dataloader-with-its-collate", "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
     + GOOD_MODEL + "def datasets():\n    d = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))\n"
     "    return d, DataLoader(d, batch_size=16, collate_fn=lambda items: items)\n",
     "(BASELINE's batch_size says yours); the loader's collate_fn goes in model.py as collate(items)"),
]


@pytest.mark.parametrize("body,expected", [v[1:] for v in VIOLATIONS], ids=[v[0] for v in VIOLATIONS])
def test_contract_violation_exits_2_with_message_and_writes_nothing(workdir, capsys, body, expected):
    path = write_model(workdir, body)
    code = main(["tune", str(path), "--trials", "2"])
    err = capsys.readouterr().err
    assert code == 2
    assert expected in err, err
    assert str(path) in err  # the message names the file
    assert not (workdir / "advisor.db").exists()  # no study created


def test_missing_file(workdir, capsys):
    assert main(["tune", str(workdir / "nope.py")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert not (workdir / "advisor.db").exists()


def test_directory_instead_of_file(workdir, capsys):
    assert main(["tune", str(workdir)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_preflight_facts_of_examples():
    for name, conv in (("digits_mlp.py", False), ("digits_cnn.py", True)):
        facts = preflight(load_workload(EXAMPLES / name))
        assert facts["train_size"] + facts["val_size"] == 1797  # sklearn's digits
        assert facts["parameters"] > 1000
        assert facts["has_conv2d"] is conv
        assert facts["tp_refusal"] is None  # each has a Linear pair with only an activation between them
    assert preflight(load_workload(EXAMPLES / "digits_mlp.py"))["pipeline_units"] == 3  # its three Linear layers


def test_what_the_preflight_says_of_splitting_a_model(tmp_path):
    convs = write_model(tmp_path, GOOD_DATA + "def model():\n    return torch.nn.Sequential(torch.nn.Unflatten(1, (1, 2, 2)),"
                        " torch.nn.Conv2d(1, 2, 1), torch.nn.Flatten(), torch.nn.Linear(8, 2))\n")
    facts = preflight(load_workload(convs))
    assert "no block to split" in facts["tp_refusal"] and facts["pipeline_units"] == 2
    split = write_model(tmp_path, GOOD_DATA + MLP + "def pipeline_split():\n    return ['1', '2']\n", "split.py")
    assert preflight(load_workload(split))["pipeline_units"] == 3  # the part before '1', then '1', then '2'


def test_independent_workload_with_dict_inputs_and_own_metric():
    """A model.py written to the contract outside the examples (dict inputs, tensor metric)."""
    wl = load_workload(WORKLOADS / "valid.py")
    assert wl.baseline == {"batch_size": 32}
    assert preflight(wl)["train_size"] == 512


def test_load_from_source_when_file_is_absent(tmp_path):
    """Workers on another node load model.py from the source the driver shipped."""
    text = (WORKLOADS / "valid.py").read_text()
    wl = load_workload(tmp_path / "elsewhere" / "model.py", source=text)
    assert wl.sha256 == load_workload(WORKLOADS / "valid.py").sha256
    assert callable(wl.model)


def test_error_names_function_and_shows_the_users_frames_only(tmp_path):
    """The user's frames (file, line, its text) and the exception; none of advisor's, and
    the library frames folded into one line saying where in them it was raised."""
    path = write_model(tmp_path, GOOD_DATA + "def model():\n    return helper()\n"
                                             "def helper():\n    return torch.zeros(2).view(3)\n")
    wl = load_workload(path)
    with pytest.raises(WorkloadError) as info:
        preflight(wl)
    text = str(info.value)
    assert "model() raised RuntimeError" in text
    assert f'File "{path}", line 8, in model' in text and "return helper()" in text
    assert f'File "{path}", line 10, in helper' in text and "torch.zeros(2).view(3)" in text
    assert "advisor/" not in text and "contract.py" not in text


def test_float64_inputs_are_said_to_be_the_datasets_not_the_models(tmp_path):
    """A review's dataset of float64 numpy arrays read as the model's fault ("mat1 and mat2
    must have the same dtype"): the message says which dtype each side has, and what to do."""
    data64 = GOOD_DATA.replace("torch.randn(64, 4)", "torch.randn(64, 4, dtype=torch.float64)")
    with pytest.raises(WorkloadError) as info:
        preflight(load_workload(write_model(tmp_path, data64 + MLP)))
    first = str(info.value).splitlines()[0]
    assert "the model's forward, on a batch of 2 training samples" in first and "raised RuntimeError" in first
    assert first.endswith("(the batch's inputs are float64 and the model's weights float32: have datasets() return "
                          "float32 inputs (a numpy float64 array: torch.from_numpy(x).float()), or build the model "
                          "in float64)")
    with pytest.raises(WorkloadError) as info:  # a forward that fails otherwise: no word on dtypes
        preflight(load_workload(write_model(tmp_path, GOOD_DATA + MLP.replace(
            "torch.nn.Linear(8, 2))", "torch.nn.Linear(8, 2), torch.nn.Unflatten(1, (5, 5)))"), "other.py")))
    assert "raised RuntimeError" in str(info.value) and "the batch's inputs are" not in str(info.value)


def test_an_import_that_never_ends_is_stopped_naming_where_it_was(workdir, capsys, monkeypatch):
    """A model.py whose import never finishes (a server it waits for, a loop) hung
    `advisor tune` with no output; now its import is bounded ($ADVISOR_IMPORT_TIMEOUT)."""
    import time

    monkeypatch.setenv("ADVISOR_IMPORT_TIMEOUT", "1")
    path = write_model(workdir, "import time\nwhile True:\n    time.sleep(0.05)\n")
    started = time.monotonic()
    assert main(["tune", str(path), "--trials", "2"]) == 2
    err = capsys.readouterr().err
    assert time.monotonic() - started < 30
    assert f"{path}: importing it did not finish within 1 s (it was at {path}, line 3: time.sleep(0.05))" in err
    assert "$ADVISOR_IMPORT_TIMEOUT" in err and not (workdir / "advisor.db").exists()
    monkeypatch.setenv("ADVISOR_IMPORT_TIMEOUT", "soon")
    assert main(["tune", str(path), "--trials", "2"]) == 2
    assert "$ADVISOR_IMPORT_TIMEOUT is 'soon': expected a positive number of seconds" in capsys.readouterr().err


def test_an_error_inside_torchs_own_module_is_one_line_of_where_not_its_frames(tmp_path):
    """A model made only of torch's modules fails in torch's code: no frame of the user's to
    show, so one line says where in torch, then the error; neither advisor's frames nor
    torch's appear."""
    path = write_model(tmp_path, GOOD_DATA + "def model():\n    return torch.nn.Linear(3, 2)\n")
    with pytest.raises(WorkloadError) as info:
        preflight(load_workload(path))
    text = str(info.value)
    assert "(raised inside torch/nn/modules/linear.py, line" in text
    assert "mat1 and mat2 shapes cannot be multiplied" in text
    assert 'File "' not in text and "advisor/" not in text


def test_pruning_is_refused_before_the_search_for_parametrized_layers(tmp_path):
    """weight_norm (and any parametrization) computes a layer's weight: torch's pruning
    cannot reparametrize it, so such layers are not pruned, and a model with nothing else
    to prune has pruning dropped with the reason (it crashed every pruned trial)."""
    from advisor.techniques.pruning import Pruning

    body = GOOD_DATA + ("from torch.nn.utils.parametrizations import weight_norm\n"
                        "def model():\n    return torch.nn.Sequential(weight_norm(torch.nn.Linear(4, 8)), "
                        "torch.nn.ReLU(), torch.nn.utils.weight_norm(torch.nn.Linear(8, 8)), torch.nn.Linear(8, 2))\n")
    facts = preflight(load_workload(write_model(tmp_path, body)))
    assert facts["prunable_layers"] == 0 and facts["parametrized_layers"] == ["0", "2"]
    reason = Pruning().pointless("l1_unstructured", facts)
    assert "0, 2 have parametrized weights" in reason and "cannot reparametrize" in reason
    mixed = GOOD_DATA + ("from torch.nn.utils.parametrizations import weight_norm\n"
                         "def model():\n    return torch.nn.Sequential(weight_norm(torch.nn.Linear(4, 8)), "
                         "torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))\n")
    facts = preflight(load_workload(write_model(tmp_path, mixed, "mixed.py")))
    assert facts["prunable_layers"] == 1 and Pruning().pointless("l1_unstructured", facts) is None


def test_a_real_ctrl_c_in_model_py_is_an_interrupt_not_a_contract_error(tmp_path):
    """A KeyboardInterrupt from SIGINT (the user pressed Ctrl-C while model.py was being
    imported) stays an interrupt; one raised by the code itself is a contract error."""
    import signal

    path = write_model(tmp_path, "import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(5)\n")
    # Python's own Ctrl-C handling, as `advisor tune` has it during the preflight (other
    # tests in this process, Ray's among them, may have changed it)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            load_workload(path)
    finally:
        signal.signal(signal.SIGINT, previous)


def test_torch_compile_inlines_a_layer_whose_forward_reads_model_pys_globals(tmp_path):
    """torch.compile imports the module of each function it inlines to read its globals: a
    Block whose forward calls F.relu, inside an nn.Sequential, failed every compiled trial
    with "No module named '_advisor_workload_conv_net_0'" (the GPU check's conv net). The
    loaded model.py is importable by its name; dynamo's eager backend traces without compiling."""
    import importlib
    import sys

    import torch

    path = write_model(tmp_path, (
        "import torch\nimport torch.nn.functional as F\nfrom torch import nn\n"
        "class Block(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.lin = nn.Linear(4, 4)\n"
        "    def forward(self, x):\n        return F.relu(self.lin(x))\n"
        "def model():\n    return nn.Sequential(Block(), nn.Linear(4, 2))\n"
        "def datasets():\n    d = [(torch.zeros(4), 0)] * 8\n    return d, d\n"))
    workload = load_workload(path)
    assert importlib.import_module(workload.module.__name__) is workload.module
    torch._dynamo.reset()
    out = torch.compile(workload.model(), backend="eager")(torch.randn(3, 4))
    assert out.shape == (3, 2)
    broken = write_model(tmp_path, "raise RuntimeError('at import')\n", name="broken.py")
    with pytest.raises(WorkloadError):
        load_workload(broken)
    assert not [m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == str(broken)]  # not kept


def test_the_check_is_seeded_so_a_file_passes_or_fails_it_on_every_run(tmp_path):
    """A metric that divides by the count of positive predictions fails on some initial
    weights (0/0) and not on others: the check is seeded as a trial is, so whatever the
    process's random state before it, the same file gets the same answer (it passed on some
    runs of the same command and was refused on others)."""
    import torch

    path = write_model(tmp_path, "import torch\nfrom torch.utils.data import TensorDataset\n"
                       "def model():\n    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), "
                       "torch.nn.Linear(16, 2))\n"
                       "def datasets():\n    g = torch.Generator().manual_seed(0)\n    x = torch.randn(64, 8, generator=g)\n"
                       "    d = TensorDataset(x, (x[:, 0] > 0).long())\n    return d, d\n"
                       "def metric(output, target):\n    pred = output.argmax(1)\n"
                       "    return ((pred == 1) & (target == 1)).sum().item() / (pred == 1).sum().item()\n")
    outcomes = set()
    for state in range(8):
        torch.manual_seed(state)
        try:
            preflight(load_workload(str(path)))
            outcomes.add("passed")
        except WorkloadError as exc:
            outcomes.add(str(exc).splitlines()[0])
    assert len(outcomes) == 1, outcomes


FROZEN = """
import torch
from torch.utils.data import TensorDataset

BASELINE = {"batch_size": 16}


def datasets():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(96, 4, generator=g)
    return TensorDataset(x[:64], (x[:64, 0] > 0).long()), TensorDataset(x[64:], (x[64:, 0] > 0).long())


def model():
    return torch.nn.Linear(4, 2).requires_grad_(False)  # frozen for serving
"""


def test_a_model_frozen_for_serving_is_measured_for_inference_and_refused_for_training(tmp_path):
    """Freezing a loaded model is how it is served: an inference study takes it (the preflight
    runs no backward, its trials build it as model() returns it); training refuses it, saying
    what to do. A review's frozen model was refused for --workload inference too."""
    from advisor.core.config import TrialConfig
    from advisor.core.results import TrialPayload, TrialSettings

    from conftest import run_as_trial

    workload = load_workload(write_model(tmp_path, FROZEN))
    facts = preflight(workload, "inference")
    assert facts["parameters"] == 10 and facts["val_size"] == 32
    with pytest.raises(WorkloadError, match="a model frozen for serving is measured with --workload inference"):
        preflight(workload)
    result = run_as_trial(TrialPayload.of(workload, TrialConfig(batch_size=16),
                                          TrialSettings(train_samples=64, workload="inference", max_timing_s=0.2)))
    assert result.ok, result.failure_message
    assert 0.0 <= result.score <= 1.0 and result.throughput > 0
