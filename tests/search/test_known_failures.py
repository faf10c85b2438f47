"""Known-failure learning (advisor/search/known_failures.py): the failure signature, the
suspect rule, and the real Strategy on a real Optuna study in a SQLite file skipping what
failed alike (results given, so each decision is exact; tests/faults/test_known_failures_in_a_study.py
runs real trials)."""

from __future__ import annotations

import optuna
import pytest

from advisor.core.config import TrialConfig
from advisor.core.events import Note, Skipped
from advisor.core.objectives import Limits
from advisor.core.results import TrialResult
from advisor.core.stored import TrialRecord, read_study
from advisor.search.known_failures import REASON, KnownFailures, is_known_failure, normalise, signature
from advisor.search.space import parse_space
from advisor.search.strategy import Strategy
from advisor.study.run._ledger import Ledger

BASE = TrialConfig(batch_size=64)
BUG = "RuntimeError: mat1 and mat2 must have the same dtype, got {n} at 0x7f{n}a0 in /tmp/advisor-{n}/model.py"
OTHER = "ValueError: the loss is not a scalar (shape [{n}])"


def failed(number, config, message=BUG, cls="error", n=None):
    return TrialRecord(number, "failed", config, failure_class=cls, failure_message=message.format(n=n or number)
                       + "\nTraceback (the workload's own frames):\n  File \"model.py\", line 12")


def completed(number, config):
    return TrialRecord(number, "complete", config)


def known(*records):
    k = KnownFailures(BASE)
    k.learn(records)
    return k


# ---- the signature -----------------------------------------------------------------------
def test_the_same_bug_in_two_trials_has_one_signature():
    assert signature("error", BUG.format(n=128)) == signature("error", BUG.format(n=4096))
    assert signature("error", BUG.format(n=128)) == (
        "error", "RuntimeError: mat1 and mat2 must have the same dtype, got # at <address> in <path>")
    assert signature("error", BUG.format(n=1)) != signature("error", OTHER.format(n=1))  # another bug
    assert signature("crash", BUG.format(n=1)) != signature("error", BUG.format(n=1))  # another class
    # only the first line counts: the traceback below it differs between trials
    assert signature("error", "ValueError: bad\n  File a.py, line 3") == signature("error", "ValueError: bad\nxyz")


def test_normalise_masks_numbers_addresses_ids_and_paths_but_keeps_names():
    assert normalise("rank 1: CUDA error at cuda:0, 2.00GiB, lr 1e-05, shapes 128x64 and 32x10") == \
        "rank #: CUDA error at cuda:#, #GiB, lr #, shapes # and #"
    assert normalise("int8 fp16 bf16 conv2d sm_90 float32 x2") == "int8 fp16 bf16 conv2d sm_90 float32 x2"
    assert normalise("ray::run() (pid=1234, ip=10.0.0.1) node a3f9c2e1b7d04e55") == "ray::run() (pid=#, ip=#.#) node #"
    assert normalise("open ./data/x1.bin or ~/a/b, not bf16/fp16") == "open <path> or <path>, not bf16/fp16"
    assert normalise("  two   spaces\t") == "two spaces"


@pytest.mark.parametrize("cls", ["oom", "timeout", "node_lost", "cancelled", "interrupted", "device_busy", None])
def test_failures_that_say_nothing_certain_about_the_configuration_are_not_learned(cls):
    assert signature(cls, BUG) is None
    k = known(failed(1, BASE.replace(precision="bf16"), cls=cls),
              failed(2, BASE.replace(precision="bf16", channels_last=True), cls=cls))
    assert k.failed == {} and k.reason(BASE.replace(precision="bf16", batch_size=128)) is None


@pytest.mark.parametrize("cls", ["error", "crash", "unsupported"])
def test_the_configurations_own_failures_are_learned(cls):
    k = known(failed(1, BASE.replace(precision="bf16"), cls=cls),
              failed(2, BASE.replace(precision="bf16", channels_last=True), cls=cls))
    reason, failure_class = k.reason(BASE.replace(precision="bf16", batch_size=128))
    assert failure_class == cls and reason.startswith(REASON)


def test_no_message_no_signature():
    assert signature("crash", "") is None and signature("crash", None) is None


# ---- the suspect rule --------------------------------------------------------------------
def test_a_single_failure_learns_nothing():
    k = known(failed(4, BASE.replace(quantization="qat_int8", channels_last=True)))
    assert k.rules == {} and k.reason(BASE.replace(quantization="qat_int8", channels_last=True, batch_size=32)) is None


def test_the_same_configuration_failing_twice_learns_nothing():
    config = BASE.replace(quantization="qat_int8")
    assert known(failed(4, config), failed(9, config)).rules == {}  # nothing to tell its knobs apart


def test_two_failures_with_different_errors_learn_nothing():
    k = known(failed(4, BASE.replace(quantization="qat_int8")),
              failed(9, BASE.replace(quantization="qat_int8", channels_last=True), OTHER))
    assert k.rules == {} and k.reason(BASE.replace(quantization="qat_int8", batch_size=32)) is None


def test_the_values_two_failures_share_beyond_the_baseline_are_suspect():
    k = known(failed(4, BASE.replace(quantization="qat_int8", channels_last=True, precision="bf16")),
              failed(9, BASE.replace(quantization="qat_int8", channels_last=True, grad_accumulation=2)))
    assert list(k.rules.values()) == [{"channels_last": True, "quantization": "qat_int8"}]
    reason, cls = k.reason(BASE.replace(quantization="qat_int8", channels_last=True, batch_size=256))
    assert cls == "error"
    assert reason == ("known failure: channels_last=True with quantization=qat_int8 failed in trials 4 and 9 with "
                      "the same error: RuntimeError: mat1 and mat2 must have the same dtype, got 4 at 0x7f4a0 in "
                      "/tmp/advisor-4/model.py")
    # every suspect pair is needed: one of them alone, or neither, is not skipped
    assert k.reason(BASE.replace(quantization="qat_int8", batch_size=256)) is None
    assert k.reason(BASE.replace(channels_last=True)) is None
    assert k.reason(BASE.replace(precision="bf16", grad_accumulation=2)) is None


def test_baseline_values_are_never_suspects():
    # both ran at the baseline's batch size 64 (and every other baseline value): only bf16 is suspect
    k = known(failed(1, BASE.replace(precision="bf16")), failed(5, BASE.replace(precision="bf16", compile=True)))
    assert list(k.rules.values()) == [{"precision": "bf16"}]
    assert k.reason(BASE.replace(compile=True)) is None  # the baseline's batch size with another knob
    assert k.reason(BASE) is None
    assert k.reason(BASE.replace(batch_size=128, precision="bf16")) is not None


def test_failures_sharing_only_baseline_values_learn_nothing():
    # the one-knob seeds: each changes another knob, so the same error points at none of them
    k = known(failed(1, BASE.replace(precision="bf16")), failed(2, BASE.replace(channels_last=True)),
              failed(3, BASE.replace(batch_size=128)))
    assert k.rules == {}
    assert all(k.reason(c) is None for c in (BASE, BASE.replace(precision="bf16", batch_size=32),
                                            BASE.replace(channels_last=True, compile=True)))


def test_the_baseline_failing_alike_clears_every_suspect():
    k = known(failed(1, BASE.replace(precision="bf16")), failed(2, BASE.replace(precision="bf16", compile=True)))
    assert k.rules
    k.add(failed(3, BASE))
    assert k.rules == {} and k.reason(BASE.replace(precision="bf16", batch_size=32)) is None


def test_a_third_failure_narrows_the_suspects_to_what_all_share():
    k = known(failed(1, BASE.replace(precision="bf16", channels_last=True)),
              failed(2, BASE.replace(precision="bf16", channels_last=True, compile=True)))
    assert list(k.rules.values()) == [{"precision": "bf16", "channels_last": True}]
    note = k.add(failed(7, BASE.replace(precision="bf16", grad_accumulation=4)))
    assert list(k.rules.values()) == [{"precision": "bf16"}]
    assert note == ("learned: precision=bf16 failed in trials 1, 2 and 7 with the same error: RuntimeError: mat1 and "
                    "mat2 must have the same dtype, got 1 at 0x7f1a0 in /tmp/advisor-1/model.py; configurations with "
                    "it are skipped from now on (not counted)")
    assert k.add(failed(8, BASE.replace(precision="bf16", batch_size=16))) is None  # no change: no new note


def test_a_completed_trial_with_every_suspect_clears_them():
    bf16_cl = BASE.replace(precision="bf16", channels_last=True)
    k = known(failed(1, bf16_cl.replace(compile=True)), failed(2, bf16_cl.replace(grad_accumulation=2)))
    assert k.reason(bf16_cl.replace(batch_size=32)) is not None
    k.add(completed(3, bf16_cl.replace(batch_size=16)))  # ran fine with both: not the cause alone
    assert k.rules == {} and k.reason(bf16_cl.replace(batch_size=32)) is None
    # completed before the failures (a resumed study reads them in trial order): never learned
    k = known(completed(1, bf16_cl), failed(2, bf16_cl.replace(compile=True)), failed(3, bf16_cl.replace(batch_size=16)))
    assert k.rules == {}
    # one completed with only one of the suspects clears nothing
    k = known(completed(1, BASE.replace(precision="bf16")), failed(2, bf16_cl.replace(compile=True)),
              failed(3, bf16_cl.replace(batch_size=16)))
    assert list(k.rules.values()) == [{"precision": "bf16", "channels_last": True}]


def test_skipped_and_duplicate_records_are_not_evidence():
    config = BASE.replace(precision="bf16")
    skipped = TrialRecord(3, "skipped", config.replace(batch_size=32), failure_class="error",
                          failure_message=REASON + "precision=bf16 failed ...")
    k = known(failed(1, config), skipped, TrialRecord(4, "duplicate", config, duplicate_of=1))
    assert k.rules == {} and k.failed[("error", normalise(BUG.format(n=1)))][0].number == 1
    assert is_known_failure(skipped) and not is_known_failure(failed(1, config))


def test_separate_bugs_are_separate_rules():
    k = known(failed(1, BASE.replace(precision="bf16")), failed(2, BASE.replace(precision="bf16", compile=True)),
              failed(3, BASE.replace(quantization="qat_int8"), OTHER),
              failed(4, BASE.replace(quantization="qat_int8", batch_size=32), OTHER))
    assert sorted(map(sorted, (r.items() for r in k.rules.values()))) == [
        [("precision", "bf16")], [("quantization", "qat_int8")]]
    assert "trials 3 and 4" in k.reason(BASE.replace(quantization="qat_int8", compile=True))[0]
    assert "trials 1 and 2" in k.reason(BASE.replace(precision="bf16", batch_size=16))[0]


# ---- the real Strategy ----------------------------------------------------------------------
SPACE = parse_space({"batch_size": {"choices": [16, 32, 64, 128]}, "precision": {"choices": ["fp32", "bf16"]}},
                    "test", "test")


def result(config: TrialConfig, number: int) -> TrialResult:
    """bf16 fails, with a message whose numbers vary as a real one's do; the rest trains."""
    if config.precision == "bf16":
        return TrialResult.failed("error", f"RuntimeError: bf16 kernel failed at step {number * 7} (0x{number:x}ff0)"
                                           "\nTraceback (the workload's own frames): ...")
    return TrialResult(ok=True, throughput=1000.0 + config.batch_size, peak_memory_bytes=10_000 * config.batch_size,
                       score=0.9, step_time_median_s=0.01)


def drive(ledger: Ledger, stop_after_failures: int | None = None) -> None:
    """Propose and tell until the strategy has nothing more (or that many failures are in)."""
    failures = 0
    while (proposal := ledger.propose()) is not None:
        record = ledger.tell(proposal.number, result(proposal.config, proposal.number), 1.0)
        failures += record.state == "failed"
        if failures == stop_after_failures:
            return


@pytest.fixture
def study(tmp_path):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}", study_name="kf",
                               directions=["maximize", "minimize", "maximize"],
                               sampler=optuna.samplers.RandomSampler(seed=0))


def new_ledger(study, events):
    """The real strategy and the ledger that asks and stores for it (a new driver's: it
    reads what the study holds)."""
    strategy = Strategy(SPACE, TrialConfig(batch_size=32), workload="train", sampler="random", budget=20,
                        limits=Limits(0.01), on_event=events.append)
    return Ledger(study, strategy, Limits(0.01), on_event=events.append)


@pytest.mark.parametrize("resume", [False, True], ids=["one-driver", "resumed-after-the-second-failure"])
def test_the_strategy_skips_what_failed_alike_twice_and_does_not_count_it(study, resume):
    events: list = []
    ledger = new_ledger(study, events)
    base = ledger.propose_baseline()
    ledger.tell(base.number, result(base.config, base.number), 1.0)
    drive(ledger, stop_after_failures=2 if resume else None)
    if resume:  # a new driver: what the two failures showed is read back from storage
        ledger = new_ledger(study, events)
        assert ledger.strategy._known_failures.rules
        drive(ledger)
    stored = read_study(study)
    ran = [r for r in stored.records if r.counted]
    failed_ = [r for r in ran if r.state == "failed"]
    skipped = [r for r in stored.records if r.state == "skipped"]
    assert len(failed_) == 2 and all(r.config.precision == "bf16" for r in failed_)
    assert len(skipped) == 2 and all(r.config.precision == "bf16" for r in skipped)
    assert {r.config.batch_size for r in failed_ + skipped} == {16, 32, 64, 128}  # each bf16 config answered once
    assert sum(r.state == "complete" for r in ran) == 4  # every fp32 configuration ran
    assert ledger.counted == len(ran) == 6  # the skipped ones do not count
    second = max(r.number for r in failed_)
    trials = " and ".join(str(r.number) for r in sorted(failed_, key=lambda r: r.number))
    for r in skipped:
        assert r.number > second and r.failure_class == "error" and is_known_failure(r)
        assert r.failure_message.startswith(f"known failure: precision=bf16 failed in trials {trials} with the "
                                            "same error: RuntimeError: bf16 kernel failed at step")
    assert [e.number for e in events if isinstance(e, Skipped)] == [r.number for r in skipped]
    notes = [e.text for e in events if isinstance(e, Note) and e.text.startswith("learned:")]
    first = min(failed_, key=lambda r: r.number).failure_message.splitlines()[0]
    note = (f"learned: precision=bf16 failed in trials {trials} with the same error: {first}; "
            "configurations with it are skipped from now on (not counted)")
    assert notes == [note]


def test_a_gpu_held_by_another_process_trial_after_trial_ends_the_search():
    """Each trial waited 30 s for a foreign process to leave the GPU, measured nothing and
    did not count: the search went on proposing forever. Three in a row end it, saying who
    holds the GPU and that the same command resumes; anything else between resets the count."""
    strategy = Strategy(SPACE, TrialConfig(batch_size=32), workload="train", sampler="random", budget=20,
                        limits=Limits(0.01))
    busy = "1 other process(es) still hold the GPU after 30 s (pids 4242): not measured, so that no figure is polluted"

    def learn(number, cls):
        strategy.learn(TrialRecord(number, "failed" if cls else "complete", TrialConfig(batch_size=64),
                                   failure_class=cls, failure_message=busy if cls else None), None)

    for number, cls in enumerate(["device_busy", "device_busy", None, "device_busy", "device_busy"]):
        learn(number, cls)
    assert strategy.gave_up is None
    learn(5, "device_busy")
    assert strategy.gave_up is not None and "(pids 4242)" in strategy.gave_up
    assert "3 trials in a row found the GPU held by another process" in strategy.gave_up
    assert "the study resumes" in strategy.gave_up and "not measured" not in strategy.gave_up
