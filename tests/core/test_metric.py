"""The metric's description: read from model.py's METRIC, and how its figures read."""

from __future__ import annotations

import pytest

from advisor.core.errors import WorkloadError
from advisor.core.metric import MetricSpec, parse_drop


def test_defaults_for_the_default_and_for_an_own_metric():
    assert MetricSpec.from_contract(None, own_metric=False, where="m.py") == MetricSpec("accuracy", True, True, "")
    own = MetricSpec.from_contract(None, own_metric=True, where="m.py")
    assert (own.name, own.higher_is_better, own.fraction) == ("metric", True, False)


def test_a_lower_is_better_metric_reads_as_itself():
    ppl = MetricSpec.from_contract({"name": "perplexity", "higher_is_better": False}, True, "m.py")
    assert ppl.score(12.5) == -12.5 and ppl.shown(-12.5) == 12.5
    assert ppl.value_text(ppl.score(12.5)) == "12.5"
    assert ppl.delta_text(ppl.score(13.0) - ppl.score(12.5)) == "+0.5"  # worse: higher perplexity
    assert "pt" not in ppl.noise_text(0.2) and ppl.noise_text(0.2) == "+-0.2"
    assert ppl.objective_name == "-perplexity (negated: higher is better)"
    nats = MetricSpec.from_contract({"name": "loss", "higher_is_better": False, "unit": "nats"}, True, "m.py")
    assert nats.delta_text(-0.25) == "+0.25 nats"
    # the same float32 values averaged in another order: +0, not a review's "-9.93e-09"
    mae = MetricSpec.from_contract({"name": "mae", "higher_is_better": False}, True, "m.py")
    assert mae.delta_text(9.93e-09) == "+0" and mae.delta_text(-2e-6) == "+2e-06"
    acc = MetricSpec()
    assert acc.value_text(0.96667) == "0.9667" and acc.delta_text(-0.014) == "-1.4 pt"
    assert MetricSpec.from_dict(ppl.to_dict()) == ppl and MetricSpec.from_dict(None) == acc


@pytest.mark.parametrize("described,message", [
    ({"nme": "x"}, "unknown key(s) 'nme'"),
    ({"name": "mae", "higher_is_beter": False}, "'higher_is_beter': did you mean 'higher_is_better'?"),
    ({"name": "ppl", "higher_is_better": "no"}, "METRIC['higher_is_better'] must be a bool, found 'no'"),
    ({"name": ""}, "METRIC['name'] must be 1 to 40 characters"),
    (["ppl"], "METRIC must be a dict"),
    # every problem at once; no suggestion of a key it gives already (a review's METRIC)
    ({"name": "acc", "higher_is_better": "yes", "lower_is_better": False},
     "m.py: METRIC: unknown key(s) 'lower_is_better' (expected name, higher_is_better, fraction, unit); "
     "METRIC['higher_is_better'] must be a bool, found 'yes'"),
])
def test_a_bad_description_names_what_and_where(described, message):
    with pytest.raises(WorkloadError, match="m.py") as info:
        MetricSpec.from_contract(described, True, "m.py")
    assert message in str(info.value)


@pytest.mark.parametrize("text,parsed", [("0.01", (0.01, False)), ("1%", (0.01, True)), (" 2.5% ", (0.025, True)),
                                         ("0", (0.0, False)), ("100%", (1.0, True))])
def test_metric_drop_amounts_and_percentages(text, parsed):
    value, relative = parse_drop(text)
    assert (round(value, 12), relative) == parsed


@pytest.mark.parametrize("text", ["-1", "150%", "lots", "inf", "nan", "%"])
def test_bad_metric_drops_are_refused(text):
    with pytest.raises(ValueError):
        parse_drop(text)
