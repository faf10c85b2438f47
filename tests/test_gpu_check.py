"""The GPU check's scripts (benchmarks/gpu/): what can be checked without the GPU machine.

Its wheels are cut and checked right, its knob tables name real knobs with values their
domains take, its arithmetic (interpolated baselines, intervals, estimate errors) is right,
and its device script refuses to run without a part. The check itself runs on a GPU.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import subprocess
import sys
import zipfile

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks" / "gpu"))


def _wheel(path, files: dict[str, bytes], requires: list[str]) -> None:
    meta = "Metadata-Version: 2.1\nName: ray\nVersion: 2.60.0\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr("ray-2.60.0.dist-info/METADATA", meta)
        z.writestr("ray-2.60.0.dist-info/RECORD", "stale,,\n")


def test_ray_is_trimmed_to_what_a_local_ray_loads_and_its_record_matches(tmp_path, monkeypatch):
    import prepare

    monkeypatch.setattr(prepare, "WHEELS", tmp_path)
    wheel = tmp_path / "ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl"
    _wheel(wheel, {"ray/__init__.py": b"x = 1\n", "ray/jars/ray_dist.jar": b"j" * 1000,
                   "ray/dashboard/client/build/main.js": b"js", "ray/rllib/algo.py": b"r",
                   "ray/dashboard/head.py": b"kept"}, ["click>=7.0", "jsonschema"])
    prepare.trim_ray()
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        record = z.read("ray-2.60.0.dist-info/RECORD").decode().splitlines()
        data = z.read("ray/__init__.py")
    assert "ray/jars/ray_dist.jar" not in names and "ray/rllib/algo.py" not in names
    assert "ray/dashboard/client/build/main.js" not in names and "ray/dashboard/head.py" in names
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    assert f"ray/__init__.py,sha256={digest},{len(data)}" in record
    assert not any(line.startswith(prepare.RAY_DROPPED) for line in record)
    assert record[-1] == "ray-2.60.0.dist-info/RECORD,,"
    before = wheel.read_bytes()
    prepare.trim_ray()  # a second pass finds nothing to cut and leaves the wheel as it is
    assert wheel.read_bytes() == before


def test_requirements_follow_markers_and_extras_and_missing_ones_are_named(tmp_path, monkeypatch):
    import prepare

    monkeypatch.setattr(prepare, "WHEELS", tmp_path)
    _wheel(tmp_path / "ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl", {},
           ["click>=7.0", "jsonschema", 'aiohttp; extra == "default"', 'pywin32; sys_platform == "win32"',
            'greenlet>=1; python_version < "3.13"'])
    needs = prepare.requirements(tmp_path / "ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl")
    assert needs == ["click", "jsonschema", "greenlet"]
    problems = prepare.check()
    assert any("needs jsonschema" in p for p in problems) and any("needs greenlet" in p for p in problems)
    assert not any("click" in p for p in problems)  # in the GPU machine's image


def test_the_pinned_wheels_are_the_versions_installed_here():
    """wheels.txt pins what this project is tested with. A fresh install here takes each
    package's newest release (optuna 5.1.0 came out after 5.0.0 was pinned, and failed every
    fresh checkout's run of this test): a newer minor or patch release here is within what
    the pin covers, an older one or another major version is a drift to decide on (update
    wheels.txt and run ``benchmarks/gpu/prepare.py``)."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.version import Version

    import prepare

    for spec in prepare.pinned():
        name, pinned = spec.split("==")
        try:
            here = Version(version(name))
        except PackageNotFoundError:
            pytest.fail(f"{name} of wheels.txt is not installed here")
        assert here.major == Version(pinned).major and here >= Version(pinned), (
            f"{name}: wheels.txt pins {pinned}, this venv has {here}")


def test_every_knob_table_names_real_knobs_with_values_their_domains_take():
    from advisor.core.config import TrialConfig
    from advisor.workload.contract import load_workload

    import knobs

    for name, groups in knobs.TABLES.items():
        for group in groups:
            assert (knobs.MODELS / f"{group.model}.py").is_file(), (name, group.model)
            for change in group.variants:
                TrialConfig(**{**dict(group.baseline), **change})  # an unknown knob or a bad value raises
    workload = load_workload(str(knobs.MODELS / "wide_mlp.py"))
    assert workload.baseline == {"batch_size": 64}  # sequences of 256 digits: 16,384 rows a matmul


def test_a_knob_this_machine_lacks_is_refused_with_its_reason():
    from advisor.core.config import TrialConfig
    from advisor.machine.hardware import detect

    import knobs

    hw = detect()
    base = TrialConfig(batch_size=16)
    if hw.device == "cpu":
        assert "TF32" in knobs.cannot_run(base.replace(precision="tf32"), base, "train", hw)
    assert "inference" in knobs.cannot_run(base.replace(quantization="int8_dynamic"), base, "train", hw)
    assert knobs.cannot_run(base.replace(activation_checkpointing=True), base, "train", hw) is None


def test_a_variant_is_compared_with_the_baseline_where_it_ran():
    import knobs

    assert knobs.at(100.0, 100.0, 0.3) == pytest.approx(100.0)
    assert knobs.at(100.0, 400.0, 0.5) == pytest.approx(200.0)  # geometric: a steady drift of the clocks
    assert knobs.at(100.0, 400.0, 0.0) == pytest.approx(100.0) and knobs.at(100.0, 400.0, 1.0) == pytest.approx(400.0)


def test_a_round_stopped_before_its_closing_baseline_still_pairs_what_it_ran(tmp_path):
    """Seen on the H100: the train part hit its limit inside GPT-2's first round, and the
    table paired nothing. A closed round interpolates between its baselines; a stopped one
    pairs with the opening baseline alone, says so, and the table is rebuilt from the run log."""
    from advisor.core.results import TrialResult

    import knobs

    def ran(throughput, memory=1000):
        return TrialResult(ok=True, throughput=throughput, peak_memory_bytes=memory)

    pairs, failures = {}, {}
    knobs.pair_round("m", [("baseline", ran(100.0)), ("a", ran(300.0)), ("b", TrialResult.failed("oom", "big")),
                           ("baseline", ran(400.0))], pairs, failures)
    assert pairs[("m", "a")][0]["throughput_ratio"] == pytest.approx(300.0 / knobs.at(100.0, 400.0, 1 / 3))
    assert pairs[("m", "a")][0]["closing_baseline"] is True and len(pairs[("m", "baseline")]) == 2
    assert failures[("m", "b")] == ["oom: big"]
    stopped = {}
    knobs.pair_round("m", [("baseline", ran(100.0, 2000)), ("a", ran(250.0, 1000))], stopped, {})
    assert stopped[("m", "a")][0]["throughput_ratio"] == pytest.approx(2.5)
    assert stopped[("m", "a")][0]["memory_ratio"] == pytest.approx(0.5)
    assert stopped[("m", "a")][0]["closing_baseline"] is False

    log = tmp_path / "knobs_train.jsonl"
    lines = [{"round": 1, "model": "m", "workload": "train", "kind": kind, "variant": variant,
              "config": {"batch_size": 16}, "result": ran(thr).to_dict()}
             for kind, variant, thr in [("baseline", "baseline", 100.0), ("variant", "a", 250.0)]]
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    (tmp_path / "knobs_train.json").write_text(json.dumps({"torch": {"torch": "2.11.0+cu130", "gpu": "H100"},
                                                            "hardware": {}, "rows": []}))
    doc = knobs.from_run_log(log)
    row = next(r for r in doc["rows"] if r["variant"] == "a")
    assert row["throughput_ratio"]["center"] == pytest.approx(2.5) and row["closing_baseline"] is False
    assert doc["torch"]["gpu"] == "H100"
    import table

    assert "2.50x (1 pair) †" in table.rows(doc)[0]


def test_estimate_errors_and_the_table_rows():
    import memory_plans
    import table

    rows = [{"estimate_bytes": 110, "measured_bytes": 100}, {"estimate_bytes": 80, "measured_bytes": 100},
            {"unavailable": "no fake tensors"}, {"estimate_bytes": 5, "measured_bytes": None}]
    summary = memory_plans.summarise(rows)
    assert summary["with_both"] == 2 and summary["unavailable"] == 1
    assert summary["median_error"] == pytest.approx(-0.05) and summary["worst_error"] == pytest.approx(-0.2)
    doc = {"torch": {"torch": "2.11.0+cu130", "gpu": "NVIDIA H100 80GB HBM3"}, "rows": [
        {"model": "gpt2_small", "workload": "train", "variant": "baseline", "runs": []},
        {"model": "gpt2_small", "workload": "train", "variant": "precision=bf16", "refused": None, "failures": [],
         "throughput_ratio": {"center": 2.5, "low": 2.4, "high": 2.6, "n": 3},
         "memory_ratio": {"center": 0.8, "low": 0.8, "high": 0.8, "n": 3}},
        {"model": "gpt2_small", "workload": "train", "variant": "precision=fp16", "refused": None,
         "failures": ["error: boom\nmore"]},
        {"model": "gpt2_small", "workload": "train", "variant": "precision=tf32", "refused": "no GPU"},
        {"model": "conv_net", "workload": "train", "variant": "baseline", "runs": [], "failures": []},
        {"model": "conv_net", "workload": "train", "variant": "precision=bf16", "refused": None, "failures": [],
         "runs": []}]}  # the part's limit came before conv_net's round (the H200's GPT-2 rows)
    lines = table.rows(doc)
    assert len(lines) == 4 and "not run: the part's limit came before its model" in lines[3]
    assert "2.50x (2.40-2.60, 3 pairs)" in lines[0] and "NVIDIA H100" in lines[0]
    assert "failed: error: boom |" in lines[1] and "refused: no GPU" in lines[2]
    assert table.ratio({"center": 1.2, "low": 0.0, "high": None, "n": 1}) == "1.20x (1 pair)"
    assert json.loads(json.dumps(doc))  # plain JSON, no Infinity


def test_one_pair_gives_an_unbounded_interval_stored_as_null():
    from advisor.core.pairs import interval

    import knobs

    found = knobs._plain(interval([1.3]))
    assert found["high"] is None and found["n"] == 1 and math.isclose(found["center"], 1.3)
    json.dumps(found, allow_nan=False)


def test_the_device_script_needs_a_part():
    script = REPO / "benchmarks" / "gpu" / "device.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    assert done.returncode == 2 and "usage" in done.stderr
