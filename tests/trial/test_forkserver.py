"""Warm trial processes (advisor/trial/forkserver.py): each trial forked from a fork server that has
already imported torch and model.py's libraries. Real Ray, real SQLite, real trials."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import optuna
import pytest

from advisor.cli.main import main
from advisor.runner import leftovers
from advisor.trial.forkserver import preload_list, workload_imports
from advisor.trial.process import describe_exit

from conftest import EXAMPLES, write_model


def test_workload_imports_are_the_top_level_absolute_ones():
    source = ("import torch, numpy as np\nfrom sklearn.datasets import load_digits\nfrom . import sibling\n"
              "def f():\n    import inside_a_function\n")
    assert workload_imports(source) == ["torch", "numpy", "sklearn.datasets"]
    assert workload_imports("def broken(:\n") == []


def test_preload_leaves_out_modules_next_to_model_py(tmp_path, monkeypatch):
    """A helper module beside model.py may be edited between studies: never preloaded;
    installed libraries are, even from a virtual environment inside the working directory."""
    (tmp_path / "my_helpers_xyz.py").write_text("X = 1\n")
    model = write_model(tmp_path, "import json\nimport my_helpers_xyz\nimport no_such_module_xyz\nimport torch.nn\n"
                                  "from json import dumps\nfrom my_helpers_xyz import X\nfrom torch.nn import Linear\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import torch

    monkeypatch.chdir(Path(torch.__file__).parents[3])  # .../lib: torch's site-packages is below
    names = preload_list(model.read_text())
    assert "json" in names and "torch.nn" in names and "torch" in names
    assert "my_helpers_xyz" not in names and "no_such_module_xyz" not in names
    # the names taken from installed libraries (a lazy library imports them on first use)
    assert "torch.nn:Linear" in names and "json:dumps" not in names and "my_helpers_xyz:X" not in names


def test_exit_descriptions():
    assert describe_exit(-9).startswith("killed by SIGKILL: the kernel's out-of-memory killer")
    assert describe_exit(-6) == "killed by SIGABRT"
    assert describe_exit(3) == "exit status 3"


LEAKY = '''"""Counts, in a module every trial shares with the fork server, how many models this
process has built: a trial that inherited another trial's state would see 2 or more."""
import json
import torch
from torch import nn
from torch.utils.data import TensorDataset

BASELINE = {"batch_size": 32}


def model():
    json.advisor_models_built = getattr(json, "advisor_models_built", 0) + 1
    return nn.Linear(4, 2)


def datasets():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 4, generator=g)
    y = (x[:, 0] > 0).long()
    return TensorDataset(x[:192], y[:192]), TensorDataset(x[192:], y[192:])


def metric(output, target):
    return torch.tensor(1.0 / json.advisor_models_built)
'''


@pytest.mark.ray
def test_no_state_passes_from_one_trial_to_the_next(ray_session, workdir):
    model = write_model(workdir, LEAKY, "leaky.py")
    space = workdir / "bs.yaml"
    space.write_text("batch_size: {choices: [16, 32, 64]}\n")
    assert main(["tune", str(model), "--space", str(space), "--trials", "3", "--no-tui", "--skip-preflight",
                 "--train-samples", "64", "--train", "all"]) == 0  # every trial's metric, in one process each
    trials = optuna.load_study(study_name="leaky-bs", storage="sqlite:///advisor.db").trials
    assert len(trials) == 3 and all(t.state.name == "COMPLETE" for t in trials)
    assert [t.values[2] for t in trials] == [1.0, 1.0, 1.0]  # each trial built its first model
    assert len({t.user_attrs["pid"] for t in trials}) == 3
    assert all("process_start" in t.user_attrs["phase_s"] for t in trials)  # forked, not cold


HANGS = '''import os
import time
import torch
from torch import nn
from torch.utils.data import TensorDataset

BASELINE = {"batch_size": 32}


class Stuck(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 2)

    def forward(self, x):
        with open(PIDS, "a") as fh:
            fh.write(f"{os.getpid()}\\n")
        time.sleep(3600)


def model():
    return Stuck()


def datasets():
    x = torch.randn(128, 4)
    return TensorDataset(x, torch.zeros(128, dtype=torch.long)), TensorDataset(x, torch.zeros(128, dtype=torch.long))
'''


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as fh:
            return "\nState:\tZ" not in fh.read()
    except FileNotFoundError:
        return False


@pytest.mark.ray
def test_a_timed_out_trial_process_does_not_outlive_its_trial(ray_session, workdir, capsys):
    pids = workdir / "pids.txt"
    model = write_model(workdir, f"PIDS = {str(pids)!r}\n" + HANGS, "hangs.py")
    space = workdir / "one.yaml"
    space.write_text("batch_size: 32\n")
    # the baseline itself times out: the study stops with status 1, saying so (and, holding
    # nothing else, it is not kept)
    assert main(["tune", str(model), "--space", str(space), "--trials", "1", "--no-tui", "--skip-preflight",
                 "--trial-timeout", "5", "--train-samples", "64"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "the baseline trial (bs=32 fp32) failed [timeout]" in err and "it was not kept" in err, err
    pid = int(pids.read_text().split()[0])
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(pid), f"the hung trial process {pid} is still running"
    # killed inside its memory estimate, it left that folder: the executor's sweep removes it
    leftovers.sweep_scratch()
    left = [p for p in Path(tempfile.gettempdir()).glob("advisor-*-*-*")
            if (p / "payload.json").is_file() and str(model) in (p / "payload.json").read_text(errors="replace")]
    assert not left, left


@pytest.mark.ray
def test_cold_trials_when_asked(ray_session, workdir, monkeypatch):
    monkeypatch.setenv("ADVISOR_COLD_TRIALS", "1")
    # --train all: one process (here one fresh Ray worker, ~5 s) a trial, not a probe's and a training run's;
    # the baseline alone (a second trial would check nothing more: the phase below is what a cold trial lacks)
    assert main(["tune", str(EXAMPLES / "digits_mlp.py"), "--space", "quick", "--trials", "1", "--no-tui",
                 "--train-samples", "128", "--train", "all"]) == 0
    trials = [t for t in optuna.load_study(study_name="digits_mlp-quick", storage="sqlite:///advisor.db").trials
              if t.state.name == "COMPLETE"]
    assert len(trials) == 1
    assert all("process_start" not in t.user_attrs["phase_s"] for t in trials)  # a fresh Ray worker, not a fork
    # the same baseline in a warm trial: the process model does not change the figures
    # (torch's lazy imports are done before the measured window in both)
    monkeypatch.delenv("ADVISOR_COLD_TRIALS")
    assert main(["tune", str(EXAMPLES / "digits_mlp.py"), "--space", "quick", "--trials", "1", "--no-tui",
                 "--train-samples", "128", "--train", "all", "--study", "warm"]) == 0
    warm_base = optuna.load_study(study_name="warm", storage="sqlite:///advisor.db").trials[0]
    cold_base = next(t for t in trials if t.user_attrs.get("baseline"))
    assert "process_start" in warm_base.user_attrs["phase_s"]
    # was 7.7 MiB apart before library pages were mapped first; at ~4 MiB of peak the two read up to 1.1 MiB
    # apart from run to run (a fresh-clone run of 7e8acfb: 3.8 against 4.9 MiB), so the bound is 2 MiB
    assert abs(warm_base.values[1] - cold_base.values[1]) < 2 * 2**20
    assert warm_base.values[2] == cold_base.values[2]  # same training, same accuracy


def test_cuda_initialised_in_the_fork_server_falls_back_to_spawned_trials(workdir, monkeypatch):
    """A forked trial that cannot use CUDA (a library model.py imports initialised it in
    the fork server) makes its worker spawn fresh interpreters from then on. No GPU here,
    so the check is monkeypatched (a fake, named as such) to say so, in trial processes
    forked from this test process (``fork``: they inherit the patch; the fork server would
    start clean). The trial must then run in a spawned process, and so must every later one.
    """
    import multiprocessing

    from advisor.core.config import TrialConfig
    from advisor.core.results import TrialPayload, TrialSettings
    from advisor.trial import forkserver
    from advisor.workload.contract import load_workload

    monkeypatch.setattr(forkserver, "_SPAWN_ONLY", False)
    monkeypatch.setattr(forkserver, "_context", lambda payload: multiprocessing.get_context("fork"))
    monkeypatch.setattr(forkserver, "_cannot_use_cuda", lambda payload: True)  # FAKE: no GPU here
    payload = TrialPayload.of(load_workload(str(EXAMPLES / "digits_mlp.py")), TrialConfig(batch_size=32),
                              TrialSettings(train_samples=64))
    result = forkserver.run_forked(payload)
    assert forkserver._SPAWN_ONLY
    assert result.ok and result.throughput > 0, result.failure_message
    assert result.telemetry["trial_process"] == "spawned" and "process_start" in result.phase_s
    later = forkserver.run_forked(payload)  # spawned too, and measures normally
    assert later.ok and later.telemetry["trial_process"] == "spawned"


def test_a_forked_trial_runs_in_a_fork(monkeypatch):
    """Without the fallback, a trial runs in a process forked from the fork server."""
    from advisor.core.config import TrialConfig
    from advisor.core.results import TrialPayload, TrialSettings
    from advisor.trial import forkserver
    from advisor.workload.contract import load_workload

    monkeypatch.setattr(forkserver, "_SPAWN_ONLY", False)
    payload = TrialPayload.of(load_workload(str(EXAMPLES / "digits_mlp.py")), TrialConfig(batch_size=32),
                              TrialSettings(train_samples=64))
    result = forkserver.run_forked(payload)
    assert result.ok and result.telemetry["trial_process"] == "forked"


PLAIN = '''import torch
from torch import nn
from torch.utils.data import TensorDataset

BASELINE = {"batch_size": 16}


def model():
    return nn.Linear(4, 2)


def datasets():
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
    return TensorDataset(x, (x[:, 0] > 0).long()), TensorDataset(x[:32], (x[:32, 0] > 0).long())
'''
# the same, importing an installed library neither torch nor advisor imports, and a name from
# a library that imports it lazily (scipy: stats on first use); its metric says whether the
# trial process started with both imported
WITH_LIBRARY = PLAIN.replace(
    "import torch\n", "import sys\nPRELOADED = 'yaml' in sys.modules and 'scipy.stats' in sys.modules\n"
                      "import yaml\nfrom scipy import stats\nimport torch\n") + '''

def metric(output, target):
    return torch.tensor(float(PRELOADED))
'''
WITH_STDLIB = PLAIN.replace("import torch\n", "import wave\nimport torch\n")


def fresh_fork_server(monkeypatch) -> None:
    """Forget this process's fork server: an earlier test's server (started for other
    workloads, holding other imports) is let go, so the next forked trial starts one."""
    from advisor.trial import forkserver

    for name, value in (("_SPAWN_ONLY", False), ("_CONTEXT", None), ("_PRELOADED", ()), ("_CHECKED", set()),
                        ("_RETIRED", [])):
        monkeypatch.setattr(forkserver, name, value)
    assert forkserver._retire_server()


def test_a_later_workloads_libraries_are_preloaded_by_a_new_fork_server(tmp_path, monkeypatch):
    """A worker's fork server outlives a study. When a later workload imports an installed
    library the running server has not imported, that server is replaced (once) by one that imports both
    workloads' libraries, so the later trials do not import it each; a workload whose
    libraries are all there keeps the server it has."""
    from multiprocessing import forkserver as mp_forkserver

    from advisor.core.config import TrialConfig
    from advisor.core.results import TrialPayload, TrialSettings
    from advisor.trial import forkserver
    from advisor.workload.contract import load_workload

    fresh_fork_server(monkeypatch)
    settings = TrialSettings(train_samples=32)

    def run(source: str, name: str) -> tuple[float, int]:
        payload = TrialPayload.of(load_workload(str(write_model(tmp_path, source, name))), TrialConfig(batch_size=16),
                                  settings)
        result = forkserver.run_forked(payload)
        assert result.ok and result.telemetry["trial_process"] == "forked", result.failure_message
        return result.score, mp_forkserver._forkserver._forkserver_pid

    first = run(PLAIN, "plain.py")[1]
    assert "yaml" not in forkserver._PRELOADED
    assert run(WITH_STDLIB, "with_stdlib.py")[1] == first  # a standard module alone: not worth a new server
    score, server = run(WITH_LIBRARY, "with_library.py")
    assert score == 1.0 and server != first and {"yaml", "torch", "scipy:stats"} <= set(forkserver._PRELOADED)
    assert run(PLAIN, "plain_again.py")[1] == server  # nothing missing: the same server
    # a new name from a library the server has imported: no new server (the trial looks it up)
    assert run(PLAIN.replace("TensorDataset\n", "TensorDataset, DataLoader\n", 1), "new_name.py")[1] == server
    deadline = time.monotonic() + 10
    while forkserver._RETIRED and time.monotonic() < deadline:  # the replaced server exits and is reaped
        forkserver._reap()
        time.sleep(0.05)
    assert forkserver._RETIRED == []


# whether torch.compile's inductor was imported before model.py (the fork server had it)
INDUCTOR_AHEAD = PLAIN.replace("import torch\n", "import sys\nAHEAD = 'torch._inductor.compile_fx' in sys.modules\n"
                                                 "import torch\n") + '''

def metric(output, target):
    return torch.tensor(float(AHEAD))
'''


def test_what_the_space_may_try_is_imported_by_a_new_fork_server_only(tmp_path, monkeypatch):
    """A payload's ``preload`` (what its study's knob values import lazily: compile's inductor)
    is imported by the fork server it starts, so no compiled trial imports it (~0.8 s each
    here); a running server is not replaced for it (a new one costs seconds)."""
    from multiprocessing import forkserver as mp_forkserver

    from advisor.core.config import TrialConfig
    from advisor.core.results import TrialPayload, TrialSettings
    from advisor.techniques.compile import INDUCTOR
    from advisor.trial import forkserver
    from advisor.workload.contract import load_workload

    fresh_fork_server(monkeypatch)
    workload = load_workload(str(write_model(tmp_path, INDUCTOR_AHEAD, "ahead.py")))

    def run(preload: tuple[str, ...]) -> tuple[float, int]:
        payload = TrialPayload(str(workload.path), workload.source, workload.sha256, TrialConfig(batch_size=16),
                               TrialSettings(train_samples=32), preload=preload)
        result = forkserver.run_forked(payload)
        assert result.ok and result.telemetry["trial_process"] == "forked", result.failure_message
        return result.score, mp_forkserver._forkserver._forkserver_pid

    score, server = run((INDUCTOR,))
    assert score == 1.0 and INDUCTOR in forkserver._PRELOADED
    assert run(()) == (1.0, server)  # the same server, still holding it
    monkeypatch.setattr(forkserver, "_CHECKED", set())
    monkeypatch.setattr(forkserver, "_PRELOADED", tuple(n for n in forkserver._PRELOADED if n != INDUCTOR))
    assert run((INDUCTOR,))[1] == server  # a server said to lack it is kept: the trial imports it itself


def test_the_executor_stamps_its_preload_on_cpu_only():
    from advisor.runner.ray_executor import RayExecutor
    from advisor.techniques.compile import INDUCTOR
    from advisor.techniques.registry import preloads

    ahead = preloads([("compile", False), ("compile", True), ("compile_optimizer", True), ("parallelism", "pp"),
                      ("parallelism", "single"), ("quantization", "none"), ("batch_size", 64)])
    assert ahead == (INDUCTOR, "torch.export:_trace")
    assert RayExecutor("cpu", preload=ahead).preload == ahead
    assert RayExecutor("cuda", preload=ahead).preload == ()  # an import must not initialise CUDA in the server


def test_a_study_preloads_what_its_space_may_try(tmp_path):
    from advisor.study.options.tune_options import TuneOptions
    from advisor.study.run.plan import plan_study
    from advisor.techniques.compile import INDUCTOR

    def ahead(space: str) -> tuple[str, ...]:
        (tmp_path / "s.yaml").write_text(space)
        return plan_study(TuneOptions(workload_path=str(EXAMPLES / "digits_mlp.py"), space=str(tmp_path / "s.yaml"),
                                      skip_preflight=True, train_samples=64,
                                      storage=f"sqlite:///{tmp_path / 's.db'}")).preload()

    assert ahead("batch_size: {choices: [32, 64]}\ncompile: {choices: [false, true]}\n") == (INDUCTOR,)
    assert ahead("batch_size: {choices: [32, 64]}\nprecision: {choices: [fp32, bf16]}\n") == ()


@pytest.mark.ray
def test_trial_processes_take_their_own_thread_count(ray_session):
    """torch fixes its thread count at import, in the fork server: a single trial gets the
    Ray task's OMP_NUM_THREADS (the node's cores), each of a DDP trial's 2 forked ranks
    its share, not the fork server's count."""
    from advisor.core.config import TrialConfig
    from advisor.core.results import TrialPayload, TrialSettings
    from advisor.runner.executor import run_one
    from advisor.runner.ray_executor import RayExecutor
    from advisor.workload.contract import load_workload

    executor = RayExecutor("cpu").start()  # joins the session's Ray
    workload = load_workload(str(EXAMPLES / "digits_mlp.py"))
    settings = TrialSettings(train_samples=128)
    single = run_one(executor, 0, TrialPayload.of(workload, TrialConfig(batch_size=32), settings), 120)
    ddp = run_one(executor, 1, TrialPayload.of(workload, TrialConfig(batch_size=32, parallelism="ddp", devices=2),
                                           settings), 120)
    cores = int(executor.resources["num_cpus"])
    assert single.ok and single.telemetry["intra_op_threads"] == cores
    assert ddp.ok and ddp.telemetry["intra_op_threads"] == max(1, cores // 2)


OWN_DATASET = '''"""A Dataset class of model.py's own (most real workloads have one): DataLoader workers
must get it without importing model.py by name (the trial loaded it under a private name)."""
import torch
from torch import nn
from torch.utils.data import Dataset

BASELINE = {"batch_size": 16}


class Pairs(Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 8, generator=g)
        self.y = (self.x.sum(1) > 0).long()

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def model():
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))


def datasets():
    return Pairs(256, 0), Pairs(64, 1)
'''


@pytest.mark.parametrize("part", ["full", "probe"])
def test_loader_workers_get_a_dataset_class_defined_in_model_py(tmp_path, monkeypatch, part):
    """num_workers > 0 with model.py's own Dataset class, in a trial process forked from the
    fork server (whose children start their own children by the fork server's method): the
    workers must not need to import model.py by its private module name."""
    from advisor.core.config import TrialConfig
    from advisor.core.results import TrialPayload, TrialSettings
    from advisor.trial import forkserver
    from advisor.workload.contract import load_workload

    monkeypatch.setattr(forkserver, "_SPAWN_ONLY", False)
    path = write_model(tmp_path, OWN_DATASET)
    payload = TrialPayload.of(load_workload(str(path)), TrialConfig(batch_size=16, num_workers=2),
                              TrialSettings(train_samples=128, part=part))
    result = forkserver.run_forked(payload)
    assert result.ok and result.throughput > 0, result.failure_message
