"""--log-to tensorboard: real event files, read back with TensorBoard's own
EventAccumulator. The study's events are replayed from a real stored study
(``tracker_events``): a folder per trial with its knobs in the HParams dashboard, its
figures as scalars, its failure as text; the confirmation as a scalar per pair; the study's
folder with its settings, the baseline, the counts and the front."""

from __future__ import annotations

import pytest

from advisor.core.errors import StudyError
from advisor.core.events import Started
from advisor.outputs.trackers import open_trackers
from advisor.study.run.tuner import StudyOutcome

from conftest import skip_without
from recorded_study import NAME
from tracker_events import CONFIRMED, finished, plan, recorded, replay, run

skip_without("tensorboard")


def read(folder):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    return events


def text(events, tag):
    return events.Tensors(tag)[-1].tensor_proto.string_val[0].decode()


def hparams(events):
    from tensorboard.plugins.hparams import plugin_data_pb2

    content = events.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
    return {k: v.string_value or v.number_value for k, v in start.session_start_info.hparams.items()}


def test_each_trial_is_a_folder_of_event_files(tmp_path):
    run(tmp_path, (f"tensorboard:{tmp_path / 'tb'}",))
    root = tmp_path / "tb" / NAME
    assert sorted(p.name for p in root.iterdir()) == ["study"] + [f"trial-{n:04d}" for n in range(11)]

    base = read(root / "trial-0000")
    assert base.Scalars("throughput")[0].value == 6736.0 and base.Scalars("accuracy")[0].value == pytest.approx(0.9667)
    knobs = hparams(base)
    assert knobs["batch_size"] == 64 and knobs["precision"] == "fp32" and knobs["threads"] == "None"
    assert knobs["state"] == "complete" and "trial 0 (baseline): bs=64 fp32" in text(base, "trial/text_summary")

    bf16 = read(root / "trial-0001")
    assert bf16.Scalars("throughput_ratio")[0].value == pytest.approx(10240 / 6736)
    assert hparams(bf16)["precision"] == "bf16"

    oom = read(root / "trial-0008")
    assert "throughput" not in oom.Tags()["scalars"] and hparams(oom)["failure_class"] == "oom"
    assert "CUDA out of memory. Tried to allocate 2.00 GiB" in text(oom, "trial/text_summary")

    confirmed = read(root / f"trial-{CONFIRMED:04d}")
    assert [s.step for s in confirmed.Scalars("confirmed/throughput_ratio")] == [1, 2, 3]
    assert "confirmed" in text(confirmed, "confirmation/text_summary")

    study = read(root / "study")
    assert NAME in text(study, "settings/text_summary") and "cpu_model" in text(study, "hardware/text_summary")
    assert study.Scalars("baseline/throughput")[0].value == 6736.0 and study.Scalars("trials/run")[0].value == 11
    front = text(study, "front/text_summary")
    assert front.startswith("| trial | config |") and f"\n| {CONFIRMED} | " in front
    assert text(study, "status/text_summary") == "finished"


def test_a_resumed_study_writes_no_trial_twice(tmp_path):
    url, study = recorded(tmp_path)
    where = (f"tensorboard:{tmp_path / 'tb'}",)
    replay(study, open_trackers(plan(url, where)))
    replay(study, open_trackers(plan(url, where)))
    trial = tmp_path / "tb" / NAME / "trial-0003"
    assert len(list(trial.glob("events.out.tfevents.*"))) == 1


def test_the_default_folder_is_runs_under_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _, notes = run(tmp_path, ("tensorboard",))
    assert (tmp_path / "runs" / NAME / "trial-0010").is_dir()
    assert notes[0].text.endswith(f"TensorBoard event files in runs/{NAME}/ (tensorboard --logdir runs/{NAME})")


def test_a_folder_lost_mid_study_is_dropped_with_one_note(tmp_path):
    url, study = recorded(tmp_path)
    trackers = open_trackers(plan(url, (f"tensorboard:{tmp_path / 'tb'}",)))
    notes = []
    trackers.notify = notes.append
    trackers.event(Started(1.0, 1, {}))
    (tmp_path / "tb" / NAME / "trial-0000").write_text("not a folder")
    for event in finished(study):
        trackers.event(event)
    trackers.close(StudyOutcome(study, None))
    assert len(notes) == 2 and notes[1].text.startswith("--log-to tensorboard: logging trial 0 failed (")


def test_a_folder_that_cannot_be_written_is_refused_before_the_study(tmp_path):
    url, _ = recorded(tmp_path)
    (tmp_path / "file").write_text("")
    with pytest.raises(StudyError, match=f"^--log-to tensorboard:{tmp_path}/file: {tmp_path}/file/{NAME} cannot be"):
        open_trackers(plan(url, (f"tensorboard:{tmp_path / 'file'}",)))
