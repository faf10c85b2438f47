"""`advisor export` says what it wrote: the trial's figures against the baseline (intervals,
"unconfirmed", the metric's verdict) and, for a pick that another trial reads better on,
why it is the pick. A review exported `--pick smallest` and got trial 6 at 0.35x memory
beside a table showing trial 5 at 0.27x, with no reason given (the report and the dashboard
said it; export did not). The study is tests/recorded_study.py's (made-up figures, named
as such), with trials 1 and 2 confirmed in pairs that overlap."""

from __future__ import annotations

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
