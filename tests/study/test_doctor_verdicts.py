"""`advisor doctor`'s verdicts: where and how they are stored, and what they do to the next
`advisor tune` (``plan_study``): an option that failed is dropped with the reason, unless
--ignore-doctor; a verdict on a user's model.py holds for that file's content only. No
trial runs here (tests/cli/test_doctor.py runs the doctor for real)."""

from __future__ import annotations

import json
import os
import stat

import pytest

from advisor.core.config import TrialConfig
from advisor.core.errors import SpaceError
from advisor.machine.doctor_store import (
    BUILTIN,
    DROP_PREFIX,
    Verdict,
    failures,
    fingerprint_hash,
    read_verdicts,
    save_verdicts,
    store_dir,
    store_path,
)
from advisor.machine.hardware import GpuInfo, detect, fingerprint
from advisor.study.doctor.offered import plan_options
from advisor.study.options.tune_options import TuneOptions
from advisor.study.run.plan import plan_study
from advisor.workload.contract import load_workload

from conftest import EXAMPLES, WORKLOADS, exit_status
from declared import A100, GiB, cpu_node, gpu_node

CNN = str(EXAMPLES / "digits_cnn.py")
MLP = str(EXAMPLES / "digits_mlp.py")


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("ADVISOR_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture(scope="module")
def here():
    return fingerprint(detect())


def fails(knob, value, error="RuntimeError: broken here", **kw):
    return Verdict(knob, value, "fails", error=error, failure_class="error", **kw)


def dropped(plan):
    return {(d.knob, json.dumps(d.value)): d.reason for d in plan.space.dropped}


def choices(plan, knob):
    return next((k.choices for k in plan.space.knobs if k.name == knob), None)


def test_store_path_follows_advisor_home_else_the_user_cache(tmp_path, monkeypatch, here):
    monkeypatch.setenv("ADVISOR_HOME", str(tmp_path / "h"))
    assert store_path(here) == tmp_path / "h" / "doctor" / f"{fingerprint_hash(here)}.json"
    monkeypatch.delenv("ADVISOR_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert store_dir() == tmp_path / "cache" / "advisor" / "doctor"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    assert store_dir() == tmp_path / "user" / ".cache" / "advisor" / "doctor"
    assert fingerprint_hash(here) == fingerprint_hash(dict(reversed(list(here.items()))))  # order-free
    assert fingerprint_hash(here) != fingerprint_hash(here | {"torch_version": "0.0"})  # a new torch: no verdicts


def test_verdicts_are_written_atomically_private_and_merged(home, here):
    path = save_verdicts(here, [fails("channels_last", True), Verdict("compile", True, "works")])
    assert path.parent == home / "doctor"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) & 0o077 == 0
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left behind
    document = json.loads(path.read_text())
    assert document["fingerprint"] == here and document["format"] == 1
    # a later run replaces the verdicts of what it ran again, keeps the others
    save_verdicts(here, [Verdict("channels_last", True, "works")])
    assert {(v.knob, v.status) for v in read_verdicts(here)} == {("channels_last", "works"), ("compile", "works")}
    assert failures(here) == []


def test_an_unreadable_or_foreign_file_counts_as_no_verdicts(home, here):
    save_verdicts(here, [fails("channels_last", True)])
    assert len(failures(here)) == 1
    path = store_path(here)
    document = json.loads(path.read_text())
    path.write_text(json.dumps(document | {"fingerprint": here | {"cpu_model": "another"}}))
    assert failures(here) == []
    path.write_text("{not json")
    assert failures(here) == []
    assert plan_study(TuneOptions(workload_path=CNN, space="quick")).space.knobs  # tune is not stopped by it


def test_a_failed_option_is_dropped_from_tune_with_the_reason_unless_ignored(home, here):
    save_verdicts(here, [fails("channels_last", True, error="RuntimeError: no channels_last kernel here")])
    plan = plan_study(TuneOptions(workload_path=CNN, space="quick"))
    assert choices(plan, "channels_last") == (False,)
    reason = dropped(plan)[("channels_last", "true")]
    assert reason == f"{DROP_PREFIX} (RuntimeError: no channels_last kernel here)"
    assert reason.startswith("failed advisor doctor on this machine (")
    assert ["channels_last", True, reason] in plan.study_attrs()["dropped_options"]
    kept = plan_study(TuneOptions(workload_path=CNN, space="quick", ignore_doctor=True))
    assert choices(kept, "channels_last") == (False, True)
    assert ("channels_last", "true") not in dropped(kept)


def test_a_dropped_condition_drops_the_knobs_that_depend_on_it(home, here):
    hw = detect()
    if hw.device != "cpu" or hw.cpu.cores < 2:
        pytest.skip("needs CPU trials with 2 or more cores (DDP over CPU ranks)")
    plan = plan_study(TuneOptions(workload_path=CNN, space="cpu"))
    assert choices(plan, "comm_hook")  # offered before the doctor's verdicts
    save_verdicts(here, [fails("parallelism", p) for p in ("ddp", "fsdp", "tp", "pp")])
    plan = plan_study(TuneOptions(workload_path=CNN, space="cpu"))
    assert choices(plan, "parallelism") == ("single",)
    for knob in ("devices", "comm_hook", "bucket_mb", "pp_schedule"):  # used only with what cannot run here
        assert choices(plan, knob) is None
        assert any(k == knob and "cannot run here" in r for (k, _), r in dropped(plan).items())


def test_a_knob_left_with_no_option_is_refused_with_exit_2(home, here, tmp_path, capsys):
    save_verdicts(here, [fails("channels_last", True)])
    space = tmp_path / "layout.yaml"
    space.write_text("channels_last: {choices: [true]}\n")
    with pytest.raises(SpaceError, match="channels_last: no option left.*--ignore-doctor"):
        plan_study(TuneOptions(workload_path=CNN, space=str(space)))
    assert exit_status(["tune", CNN, "--space", str(space), "--storage", f"sqlite:///{tmp_path}/s.db"]) == 2
    assert "failed advisor doctor on this machine" in capsys.readouterr().err
    assert not (tmp_path / "s.db").exists()
    assert choices(plan_study(TuneOptions(workload_path=CNN, space=str(space), ignore_doctor=True)),
                   "channels_last") == (True,)


def test_a_verdict_on_a_model_holds_for_that_model_only(home, here):
    path = str(WORKLOADS / "refuses_micro_batches.py")
    sha = load_workload(path).sha256
    save_verdicts(here, [fails("grad_accumulation", 4, error="RuntimeError: refuses 16", model=path, model_sha256=sha)])
    own = plan_study(TuneOptions(workload_path=path, space="default"))
    assert choices(own, "grad_accumulation") == (1, 2)
    assert dropped(own)[("grad_accumulation", "4")] == (
        f"{DROP_PREFIX} (refuses_micro_batches.py: RuntimeError: refuses 16)")
    other = plan_study(TuneOptions(workload_path=MLP, space="default"))
    assert choices(other, "grad_accumulation") == (1, 2, 4)


def test_tune_has_the_override_flag():
    from advisor.cli.main import parser

    assert parser().parse_args(["tune", CNN, "--ignore-doctor"]).ignore_doctor is True
    assert parser().parse_args(["tune", CNN]).ignore_doctor is False


def test_each_offered_option_runs_alone_with_what_it_needs():
    """On declared hardware (no trial runs): every offered option but the reference's own
    values, as the reference with that knob changed plus the knobs it cannot run without."""
    base = TrialConfig(batch_size=64)
    for hw in (cpu_node(cores=4), gpu_node(A100, A100)):
        options = {(o.knob, json.dumps(o.value)): o for o in plan_options(hw, base, {})}
        assert ("precision", '"fp32"') not in options  # the reference itself
        comm = options[("comm_hook", '"fp16"')]
        assert comm.config == base.replace(parallelism="ddp", devices=2, comm_hook="fp16")
        assert comm.context == base.replace(parallelism="ddp", devices=2)
        ddp = options[("parallelism", '"ddp"')]
        assert ddp.config == base.replace(parallelism="ddp", devices=2) and ddp.context is None
        mode = options[("compile_mode", '"max-autotune-no-cudagraphs"')]
        assert mode.context == base.replace(compile=True)
        assert options[("grad_accumulation", "2")].config == base.replace(grad_accumulation=2)
        for o in options.values():
            assert o.config is None or o.config.to_dict()[o.knob] == o.value
    gpu = {(o.knob, json.dumps(o.value)) for o in plan_options(gpu_node(A100), base, {})}
    assert ("precision", '"tf32"') in gpu and ("threads", "1") not in gpu
    assert ("parallelism", '"ddp"') not in gpu  # one GPU: DDP is not offered


def test_on_cuda_the_half_only_attention_kernels_run_in_bf16():
    """On a DECLARED H100 the flash and cuDNN kernels, which take fp16 / bf16 only on CUDA
    (the fp32 reference failed with "No available kernel"), run with bf16, their context;
    on a DECLARED CPU torch's flash kernel runs in the reference's fp32, alone."""
    base = TrialConfig(batch_size=64)
    h100 = gpu_node(GpuInfo(0, "NVIDIA H100 80GB HBM3", (9, 0), 80 * GiB))
    options = {o.value: o for o in plan_options(h100, base, {}, knobs=["sdpa_backend"])}
    for backend in ("flash", "cudnn"):
        assert options[backend].config == base.replace(sdpa_backend=backend, precision="bf16")
        assert options[backend].context == base.replace(precision="bf16")
    efficient = options["efficient"]  # takes fp32 on CUDA: alone
    assert efficient.config == base.replace(sdpa_backend="efficient") and efficient.context is None
    flash = plan_options(cpu_node(), base, {}, knobs=["sdpa_backend"])
    assert [(o.value, o.config, o.context) for o in flash if o.value == "flash"] == [
        ("flash", base.replace(sdpa_backend="flash"), None)]


def test_an_option_pointless_for_the_model_is_not_run():
    options = plan_options(cpu_node(), TrialConfig(), {"has_conv2d": False}, knobs=["channels_last"])
    assert [(o.label, o.config) for o in options] == [("channels_last=true", None)]
    assert "no 2-D convolutions" in options[0].note


def test_the_store_is_under_the_test_home(home, here):
    assert str(store_path(here)).startswith(str(home))
    assert not os.path.exists(home)  # nothing is written until a doctor run saves
    assert BUILTIN == "built-in"


def test_resuming_a_study_the_verdicts_changed_says_how_to_keep_its_space(home, here, tmp_path, quiet_optuna):
    from advisor.core.errors import StudyError
    from advisor.study.run.plan import open_study
    from advisor.study.storage.stores import open_storage

    options = TuneOptions(workload_path=CNN, space="quick", storage=f"sqlite:///{tmp_path}/s.db")
    plan = plan_study(options)
    open_study(plan, open_storage(plan.storage_url))  # the study starts before the doctor ran
    save_verdicts(here, [fails("channels_last", True)])
    again = plan_study(options)
    with pytest.raises(StudyError, match="advisor doctor's verdicts drop options from its space here: "
                                         "--ignore-doctor keeps them"):
        open_study(again, open_storage(again.storage_url))
    kept = plan_study(TuneOptions(workload_path=CNN, space="quick", storage=options.storage, ignore_doctor=True))
    assert open_study(kept, open_storage(kept.storage_url)).study_name == plan.study_name
