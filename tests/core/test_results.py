"""What a trial is given and returns, as stored by older versions: the part a trial runs
(``TrialSettings.part``, once ``stage``, whose second part was once "accuracy") and the
metric's score (``TrialResult.score``, stored under the key "accuracy")."""

from __future__ import annotations

import pytest

from advisor.core.results import PARTS, TrialResult, TrialSettings
from advisor.core.stored import SCORE, result_attrs, result_dict, stored_result


def test_a_part_is_one_word_and_older_settings_read_as_today():
    assert PARTS == ("full", "probe", "training")
    assert TrialSettings.from_dict({"train_samples": 8, "stage": "probe"}).part == "probe"  # a study's stored settings
    assert TrialSettings.from_dict({"train_samples": 8, "stage": "accuracy"}).part == "training"
    assert TrialSettings(train_samples=8, part="accuracy").part == "training"
    assert "stage" not in TrialSettings(train_samples=8).to_dict()
    with pytest.raises(ValueError, match="expected one of full, probe, training"):
        TrialSettings(train_samples=8, part="evaluation")


def test_the_score_is_stored_under_its_older_key():
    result = TrialResult(ok=True, throughput=100.0, score=-0.25, train_samples=64)
    attrs = result_attrs(result, 1.5)
    assert SCORE == "accuracy" and attrs[SCORE] == -0.25 and "score" not in attrs
    assert result_dict(result)[SCORE] == -0.25
    assert stored_result(attrs) == result  # read back: the same result
