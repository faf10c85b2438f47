"""`advisor export` says what it wrote: the trial's figures against the baseline (intervals,
"unconfirmed", the metric's verdict) and, for a pick that another trial reads better on,
why it is the pick. A review exported `--pick smallest` and got trial 6 at 0.35x memory
beside a table showing trial 5 at 0.27x, with no reason given (the report and the dashboard
said it; export did not). The study is tests/recorded_study.py's (made-up figures, named
as such), with trials 1 and 2 confirmed in pairs that overlap."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.cli.main import main
from advisor.core.pairs import Confirmation, Pair
from advisor.core.stored import CONFIRMATION
from tests.recorded_study import NAME, write_recorded_study


def confirmed(trial: int, ratios: list[float]) -> dict:
    return Confirmation(trial, [Pair(0.5, 1000.0, 1000.0 * r, 100.0, 100.0) for r in ratios], "confirmed").to_dict()


def test_export_says_the_figures_and_why_a_tie_went_the_way_it_did(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = write_recorded_study(url)
    study.set_user_attr(f"{CONFIRMATION}1", confirmed(1, [1.40, 1.48, 1.56, 1.45, 1.51]))  # bf16
    study.set_user_attr(f"{CONFIRMATION}2", confirmed(2, [1.44, 1.52, 1.60, 1.49, 1.55]))  # bs=256 channels_last
    assert main(["export", "--storage", url, "--study", NAME, "--pick", "fastest", "-o", "f.yaml"]) == 0
    out = capsys.readouterr().out
    assert "wrote trial 1 of study" in out
    assert "measured:  throughput 1.48x (" in out and ", 5 pairs, memory 1.00x (" in out and "accuracy" in out
    assert "why:       the fastest pick: trial 2 reads faster (throughput 1.52x (" in out
    assert "not beyond the noise, so they tie; a tie goes to the configuration that changes fewer knobs" in out
    assert main(["export", "--storage", url, "--study", NAME, "--trial", "3", "-o", "t.yaml"]) == 0
    out = capsys.readouterr().out
    assert "measured:  throughput 1.62x unconfirmed, memory 1.95x unconfirmed, accuracy" in out and "why:" not in out
    assert main(["export", "--storage", url, "--study", NAME, "--trial", "0", "-o", "b.yaml"]) == 0
    assert "measured:  the baseline itself" in capsys.readouterr().out


def test_the_picks_line_names_each_pick_and_its_tie(tmp_path):
    from advisor.core.stored import read_study
    from advisor.outputs.summary import picks_line
    from advisor.study.storage import stores as st

    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = write_recorded_study(url)
    study.set_user_attr(f"{CONFIRMATION}1", confirmed(1, [1.40, 1.48, 1.56, 1.45, 1.51]))
    study.set_user_attr(f"{CONFIRMATION}2", confirmed(2, [1.44, 1.52, 1.60, 1.49, 1.55]))
    line = picks_line(read_study(st.load(st.open_storage(url, must_exist=True), NAME, url)))
    assert line.startswith("fastest trial 1 (a tie: trial 2 reads better within the noise), smallest trial ")
    assert ", best-metric trial " in line and ", balanced trial " in line


def test_the_format_follows_the_files_name_and_a_name_that_contradicts_it_is_refused(tmp_path, capsys, monkeypatch):
    """`-o best.json` writes JSON and `-o train.py` a script without --format; `--format hf -o
    best.yaml` (a review wrote Python into a .yaml that load_config then failed on) is refused
    with exit 2 before anything is written. The Python API does the same."""
    import json

    import yaml

    from advisor.api.result import TuneResult
    from advisor.core.errors import ConfigError
    from advisor.core.stored import read_study
    from advisor.study.storage import stores as st

    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    write_recorded_study(url)
    base = ["export", "--storage", url, "--study", NAME, "--trial", "1"]
    assert main([*base, "-o", "a.json"]) == 0 and json.loads(Path("a.json").read_text())["config"]["batch_size"]
    assert main([*base, "-o", "a.yml"]) == 0 and yaml.safe_load(Path("a.yml").read_text())["config"]
    assert main([*base, "-o", "a.py"]) == 0 and "advisor.apply(" in Path("a.py").read_text()
    assert main([*base, "-o", "a.cfg"]) == 0 and yaml.safe_load(Path("a.cfg").read_text())["config"]  # yaml
    assert main([*base, "--format", "accelerate", "-o", "acc.yaml"]) == 0
    assert main([*base, "--format", "hf", "--json", "-o", "hf.json"]) == 0 and "transformers" in json.loads(
        Path("hf.json").read_text())
    capsys.readouterr()
    for flags, said in [(["--format", "hf", "-o", "best.yaml"], "--format hf writes a Python module, but 'best.yaml' "
                         "is named as a YAML file: name it 'best.py', or write accelerate or yaml to that name"),
                        (["--format", "json", "-o", "best.py"], "--format json writes a JSON config, but 'best.py'"),
                        (["-o", "run.sh", "--format", "python"], "name it 'run.py'"),
                        (["--json", "-o", "best.yaml"], "--json writes a JSON config, but 'best.yaml'")]:
        assert main([*base, *flags]) == 2, flags
        err = capsys.readouterr().err
        assert said in err, err
        assert not Path(flags[flags.index("-o") + 1]).exists()
    study = read_study(st.load(st.open_storage(url, must_exist=True), NAME, url))
    result = TuneResult.of(study, url, "model.py", None)
    with pytest.raises(ConfigError, match=r"export\(format='hf'\) writes a Python module, but 'x.yaml'"):
        result.export("x.yaml", trial=1, format="hf")
    assert not Path("x.yaml").exists()
    assert json.loads(result.export("x.json", trial=1))["config"] == yaml.safe_load(result.export(trial=1))["config"]
    with pytest.raises(ConfigError, match="export\\(format='toml'\\) is unknown"):
        result.export(trial=1, format="toml")
