"""What the study's metric is: its name, whether higher is better, and how it reads.

model.py may describe its metric (``METRIC = {"name": "perplexity", "higher_is_better":
False}``); without it, the default metric is top-1 accuracy (a fraction, higher is better)
and a ``metric()`` of the user's own is called "metric", higher is better, shown as the
number it is.

Internally the study keeps one orientation: the figure it stores and compares (the third
objective, ``score`` in the code; stored under the key "accuracy", its name before issue 28)
is the **score**, the metric itself when higher is better and its negative when lower is:
every rule (feasibility, dominance, the Pareto front, the metric gate, the picks) reads
"higher is better". ``score()``
turns a measured metric into it (in the trial, once); everything shown to a user goes
back through ``shown()``, ``value_text()`` and ``delta_text()``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from advisor.core.errors import WorkloadError

KEYS = {"name": str, "higher_is_better": bool, "fraction": bool, "unit": str}


# a difference of metric values below this is float rounding (float32 values averaged in another order)
ROUNDING = 1e-6

@dataclass(frozen=True)
class MetricSpec:
    """``fraction``: a value in [0, 1] (accuracy, F1) shown with 4 decimals, differences in
    percentage points ("pt"); otherwise shown as the number it is, differences in ``unit``."""

    name: str = "accuracy"
    higher_is_better: bool = True
    fraction: bool = True
    unit: str = ""

    @classmethod
    def from_contract(cls, described: Any, own_metric: bool, where: str) -> MetricSpec:
        """From model.py's METRIC (None when absent); ``own_metric``: model.py defines metric()."""
        if described is None:
            return cls() if not own_metric else cls(name="metric", fraction=False)
        if not isinstance(described, dict):
            raise WorkloadError(f"{where}: METRIC must be a dict such as {{'name': 'perplexity', "
                                f"'higher_is_better': False}}, found {type(described).__name__}")
        problems = []  # every one at once, as BASELINE's are (a review fixed them one run at a time)
        unknown = sorted(set(described) - set(KEYS))
        if unknown:
            import difflib

            # a suggestion only of a key it does not give already ('lower_is_better' beside 'higher_is_better')
            near = [f"{k!r}: did you mean {close[0]!r}?" for k in unknown
                    if (close := difflib.get_close_matches(k, [x for x in KEYS if x not in described], n=1))]
            problems.append(f"unknown key(s) {', '.join(map(repr, unknown))} (expected {', '.join(KEYS)})"
                            + (f"; {'; '.join(near)}" if near else ""))
        problems += [f"METRIC[{key!r}] must be a {kind.__name__}, found {described[key]!r}"
                     for key, kind in KEYS.items() if key in described and not isinstance(described[key], kind)]
        if problems:
            raise WorkloadError(f"{where}: METRIC: {'; '.join(problems)}")
        name = described.get("name", "accuracy" if not own_metric else "metric").strip()
        if not name or len(name) > 40:
            raise WorkloadError(f"{where}: METRIC['name'] must be 1 to 40 characters, found {described.get('name')!r}")
        default_fraction = bool(not own_metric and described.get("higher_is_better", True))
        return cls(name=name, higher_is_better=described.get("higher_is_better", True),
                   fraction=bool(described.get("fraction", default_fraction)), unit=described.get("unit", "").strip())

    @classmethod
    def from_dict(cls, stored: dict[str, Any] | None) -> MetricSpec:
        """As a study stored it (studies from before this was stored: accuracy)."""
        if not stored:
            return cls()
        return cls(**{k: stored[k] for k in KEYS if k in stored})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def sign(self) -> float:
        return 1.0 if self.higher_is_better else -1.0

    def score(self, value: float) -> float:
        """The measured metric as the study compares it (higher is better)."""
        return self.sign * value

    def shown(self, score: float) -> float:
        """The metric itself, from its score."""
        return self.sign * score + 0.0

    def value_text(self, score: float) -> str:
        value = self.shown(score)
        if self.fraction:
            return f"{value:.4f}"
        return f"{value:.4g}" + (f" {self.unit}" if self.unit else "")

    def delta_text(self, delta: float) -> str:
        """A difference of scores, as the metric's own difference ('+1.2 pt', '-0.35 nats')."""
        value = self.sign * delta
        if abs(value) < ROUNDING:  # the same values summed in another order: "+0", not "-9.93e-09"
            value = 0.0
        if self.fraction:  # rounded first, + 0.0: no "-0.0 pt" for a difference that rounds to none
            return f"{round(100 * value, 1) + 0.0:+.1f} pt"
        return f"{float(f'{value:.3g}') + 0.0:+.3g}" + (f" {self.unit}" if self.unit else "")

    def amount_text(self, amount: float) -> str:
        """The size of a difference, without a sign ('1.5 pt', '0.233 units^2')."""
        return self.delta_text(self.sign * abs(amount)).lstrip("+")

    def noise_text(self, epsilon: float) -> str:
        """A noise half-width (a magnitude)."""
        if self.fraction:
            return f"+-{100 * epsilon:.2f} pt"
        return f"+-{epsilon:.3g}" + (f" {self.unit}" if self.unit else "")

    @property
    def objective_name(self) -> str:
        """The third objective's name in Optuna tools (what the stored values are)."""
        return self.name if self.higher_is_better else f"-{self.name} (negated: higher is better)"

    @property
    def direction_word(self) -> str:
        return "higher is better" if self.higher_is_better else "lower is better"

    @property
    def delta_header(self) -> str:
        """A table's column of differences to the baseline ("Δ acc" for accuracy)."""
        return "Δ acc" if self.name == "accuracy" else f"Δ {self.name}"


DEFAULT_METRIC = MetricSpec()  # the default metric: top-1 accuracy, a fraction, higher is better


def parse_drop(text: str) -> tuple[float, bool]:
    """``--max-metric-drop``: an amount of the metric ("0.01") or a percentage of the
    baseline's ("1%"). Returns (value, relative); ValueError with the reason."""
    raw = text.strip()
    relative = raw.endswith("%")
    try:
        value = float(raw[:-1] if relative else raw)
    except ValueError:
        raise ValueError(f"expected an amount of the metric such as 0.01, or a percentage of the baseline's "
                         f"such as 1%, found {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"must be a finite amount >= 0, found {text!r}")
    if relative and value > 100:
        raise ValueError(f"a percentage must be at most 100%, found {text!r}")
    return (value / 100, True) if relative else (value, False)
