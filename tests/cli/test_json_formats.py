"""Every `--json` output is one JSON document on stdout whose first key names its kind and
format version ("format": "advisor.<kind>/<n>", advisor/outputs/json_output.py)."""

from __future__ import annotations

import inspect
import json
import shutil
from types import SimpleNamespace

import pytest

from advisor.cli import main as cli_main
from advisor.outputs import console, json_output
from advisor.outputs.json_output import VERSIONS, format_tag

from conftest import REPO, exit_status

OLD_STUDY = REPO / "tests" / "data" / "study_before_layers.sqlite"
# every command that prints results, and the kinds its --json prints
JSON_COMMANDS = {"tune": {"tune"}, "confirm": {"confirm"}, "hardware": {"hardware"}, "doctor": {"doctor"},
                 "spaces": {"spaces", "space"}, "export": {"export"}, "measure": {"measure"}, "report": {"report"},
                 "studies": {"studies"}, "trials": {"trials"}}


@pytest.fixture
def old_study(workdir):
    """A copy of a study recorded by a real `advisor tune` (4 trials of examples/digits_mlp.py)."""
    shutil.copy(OLD_STUDY, workdir / "old.db")
    return "sqlite:///old.db"


def accuracy_keys(document, where: str = "") -> list[str]:
    """The keys, at any depth, that still name the metric "accuracy" (issue 32: a study's
    metric can be any metric; the documents say "score" and "metric")."""
    if isinstance(document, dict):
        return [f"{where}.{k}" for k in document if "accuracy" in str(k)] + [
            hit for k, v in document.items() for hit in accuracy_keys(v, f"{where}.{k}")]
    if isinstance(document, list):
        return [hit for i, v in enumerate(document) for hit in accuracy_keys(v, f"{where}[{i}]")]
    return []


def printed(argv: list[str], capsys) -> dict:
    code = exit_status(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    document = json.loads(out)  # stdout holds the document and nothing else
    assert next(iter(document)) == "format"
    return document


def test_every_kind_is_versioned_in_one_place():
    assert format_tag("tune") == "advisor.tune/2"
    assert set(VERSIONS) == set().union(*JSON_COMMANDS.values())
    assert all(isinstance(v, int) and v >= 1 for v in VERSIONS.values())


def test_every_result_command_has_json():
    parser = cli_main.parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    with_json = {name for name, p in sub.choices.items() if any("--json" in a.option_strings for a in p._actions)}
    assert with_json == set(JSON_COMMANDS)


@pytest.mark.parametrize("command", ["tune", "confirm", "doctor", "measure"])
def test_slow_commands_print_through_the_tagged_helper(command):
    """tune, confirm, doctor and measure run trials (tens of seconds to minutes each): their
    --json runs are covered by their own tests; here the code that prints their document
    is checked to tag it with its kind."""
    module = console.TuneOutput if command == "tune" else cli_main.COMMANDS[command]
    assert f'print_json("{command}"' in inspect.getsource(module)


def test_tune_summary_is_tagged(old_study, capsys):
    """The summary `advisor tune --json` ends with, printed for a stored study (the plan is
    a stand-in holding the one field the summary reads: running a study takes tens of seconds)."""
    from advisor.study.run.tuner import StudyOutcome
    from advisor.study.storage.stores import load, open_storage

    study = load(open_storage(old_study, must_exist=True), "compat")
    output = console.TuneOutput(json_mode=True)
    assert output.finish(SimpleNamespace(storage_url=old_study), StudyOutcome(study, None)) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["format"] == "advisor.tune/2" and document["study"] == "compat"
    assert document["front"][0]["trial"] == 0
    assert document["front"][0]["score"] == pytest.approx(0.6417, abs=1e-4) and "metric_delta" in document["front"][0]
    assert accuracy_keys(document) == []


def test_hardware(capsys):
    document = printed(["hardware", "--json"], capsys)
    assert document["format"] == "advisor.hardware/1" and document["options"]


def test_spaces_lists_the_presets(capsys):
    from advisor import search_spaces

    document = printed(["spaces", "--json"], capsys)
    assert document["format"] == "advisor.spaces/1"
    presets = {p["name"]: p for p in document["presets"]}
    assert set(presets) == set(search_spaces.names())
    assert presets["quick"]["configurations"] == 32 and "batch_size" in presets["quick"]["knobs"]
    assert all(p["description"] for p in presets.values())


def test_one_space_filtered_for_this_machine(capsys, workdir):
    (workdir / "space.yaml").write_text("batch_size: {choices: [16, 32]}\nprecision: {choices: [fp32, tf32]}\n"
                                        "compile_mode: {choices: [default, max-autotune], when: {compile: true}}\n"
                                        "compile: {choices: [false, true]}\n")
    document = printed(["spaces", "space.yaml", "--json"], capsys)
    assert document["format"] == "advisor.space/1"
    assert document["space"] == "space" and document["configurations"] == 2 * 2 * (1 + 2)
    knobs = {k["name"]: k for k in document["knobs"]}
    assert knobs["batch_size"]["choices"] == [16, 32] and knobs["batch_size"]["when"] == {}
    import torch

    if not torch.cuda.is_available():  # tf32 needs a CUDA GPU: dropped here, with the reason
        assert knobs["precision"]["choices"] == ["fp32"]
        dropped = {(d["knob"], d["value"]): d for d in document["dropped"]}
        assert "no CUDA GPU" in dropped[("precision", "tf32")]["reason"]
        assert dropped[("precision", "tf32")]["whole_knob"] is False
    if "compile_mode" in knobs:
        assert knobs["compile_mode"]["when"] == {"compile": True}


def test_export_document_is_tagged_and_still_loads(old_study, capsys, workdir):
    import advisor

    document = printed(["export", "--storage", old_study, "--trial", "0", "--json"], capsys)
    assert document["format"] == "advisor.export/2" and document["advisor_config"] == 2
    assert document["source"] == document["source"] | {"study": "compat", "trial": 0}
    assert document["measured"]["score"] == document["measured"]["metric"]["value"] and accuracy_keys(document) == []
    (workdir / "best.json").write_text(json.dumps(document))
    assert advisor.load_config(workdir / "best.json").batch_size == 32


def test_report_prints_its_files_and_figures(old_study, capsys, workdir):
    pytest.importorskip("matplotlib")
    document = printed(["report", "--storage", old_study, "-o", "out", "--json"], capsys)
    assert document["format"] == "advisor.report/3"
    assert document["report"] == "out/report.md" and (workdir / "out" / "report.md").is_file()
    assert all((workdir / p).is_file() for p in document["plots"])
    assert document["counts"]["trials"] == 4 and document["metric"]["name"] == "accuracy"
    front = {row["trial"]: row for row in document["front"]}
    assert front[0]["baseline"] is True and front[0]["metric_value"] == pytest.approx(0.6417, abs=1e-4)
    assert set(document["picks"]) == {"fastest", "smallest", "best-metric", "balanced"}
    assert {e["knob"] for e in document["knob_effects"]} == {"batch_size", "grad_accumulation"}
    assert accuracy_keys(document) == []


def test_the_helper_puts_the_tag_first_and_keeps_the_body():
    document = json_output.json_document("confirm", {"study": "s", "format": "ignored", "confirmations": []})
    assert list(document) == ["format", "study", "confirmations"] and document["format"] == "advisor.confirm/1"
