"""model.py's optional collate(): items of different lengths, padded per batch, in the
preflight, in every trial (training, evaluation, timing) and in the exported script."""

from __future__ import annotations

import pytest

from advisor.core.errors import WorkloadError
from advisor.core.stored import read_study
from advisor.study.storage import stores as st
from advisor.workload.contract import load_workload
from advisor.workload.preflight import preflight

from conftest import WORKLOADS, exit_status, write_model

VARLEN = WORKLOADS / "varlen_digits.py"


def test_the_preflight_batches_variable_length_items_with_collate():
    workload = load_workload(VARLEN)
    assert workload.collate is not None
    train, _ = workload.datasets()
    assert len({len(x) for x, _ in train}) > 5  # the items really differ in length
    facts = preflight(workload)
    assert facts["train_size"] == 1437 and facts["val_size"] == 360


def test_without_collate_the_message_says_to_define_one(tmp_path):
    source = VARLEN.read_text().replace("def collate(items):", "def _unused(items):")
    with pytest.raises(WorkloadError, match=r"inconsistent shapes.*define collate\(items\) -> \(input, target\)"):
        preflight(load_workload(write_model(tmp_path, source)))


def test_a_collate_that_fails_is_shown_in_its_own_frames(tmp_path):
    path = write_model(tmp_path, VARLEN.read_text().replace(
        "    sequences = [x for x, _ in items]", "    sequences = [x for x, _ in items]\n    raise ValueError('bad pad')"))
    with pytest.raises(WorkloadError) as info:
        preflight(load_workload(path))
    text = str(info.value)
    assert f"{path}: collate(): on 2 training items, raised ValueError: bad pad" in text
    assert f'File "{path}", line' in text and "advisor/" not in text
    wrong = write_model(tmp_path, VARLEN.read_text().replace(
        "    return {\"tokens\": padded, \"lengths\": lengths}, torch.tensor([y for _, y in items])",
        "    return padded"), "wrong.py")
    with pytest.raises(WorkloadError, match=r"collate\(\) must return \(input, target\), found Tensor"):
        preflight(load_workload(wrong))


@pytest.mark.ray
def test_a_study_of_variable_length_items_tunes_end_to_end(ray_session, workdir):
    """Real trials through Ray: every trial trains, evaluates and is timed on batches that
    model.py's collate() padded; the metric is far above chance."""
    assert exit_status(["tune", str(VARLEN), "--trials", "3", "--train-samples", "1437", "--space", "eager",
                        "--no-tui"]) == 0
    study = read_study(st.load(st.open_storage("sqlite:///advisor.db"), "varlen_digits-eager"))
    failed = [(r.number, r.failure_class, r.failure_message) for r in study.records
              if r.state == "failed" and r.failure_class in ("error", "crash")]
    assert not failed, failed
    measured = [r for r in study.records if r.state in ("complete", "probed")]
    assert len(measured) >= 2
    assert study.baseline is not None and study.baseline.figures.score > 0.5, study.baseline
