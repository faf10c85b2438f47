"""Known-failure learning: once trials with otherwise different settings fail with the
same error, the configurations that share what they have in common are not run again.

The rule (documented, deliberately conservative):

- a failure's *signature* is its class and the first line of its message with what varies
  from trial to trial masked (``normalise``: numbers, addresses and ids, file paths). Only
  the configuration's own failures are learned from: ``error``, ``crash`` and
  ``unsupported`` (a technique refusing the model). ``oom`` is known-OOM's rule
  (``known_oom``); a timeout, a lost node, a cancelled or interrupted trial says nothing
  certain about the configuration;
- the *suspects* of a signature are the knob=value pairs that every trial failing with it
  has, where the value is not the baseline's (a bug the baseline's values share with
  every configuration would otherwise skip the whole space). Nothing is suspect until two
  trials with different configurations failed alike, nor when they share no value beyond
  the baseline's, nor once a trial with every suspect pair completed;
- a configuration with every suspect pair of a signature is recorded as skipped with the
  failure's class, the reason naming the trials and their error; it does not count
  towards --trials.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from advisor.core.config import TrialConfig
from advisor.core.stored import TrialRecord
from advisor.core.units import first_line

LEARNED_CLASSES = ("error", "crash", "unsupported")  # the configuration's own failures
REASON = "known failure: "  # how the reason of every such skip starts (``is_known_failure``)
_WHAT = {"error": "error", "crash": "crash", "unsupported": "refusal"}

Signature = tuple[str, str]  # (failure class, normalised first line)

# masked in this order: a path holds numbers, an address hexadecimal digits
_PATH = re.compile(r"(?<![\w.])(?:[A-Za-z]:|\.{1,2}|~)?(?:[\\/][\w.+~@-]+){2,}[\\/]?")
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
_HEX_ID = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b")  # node ids, hashes, uuids' parts
_NUMBER = re.compile(r"(?<![A-Za-z_\d])\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?:[x×]\d+)*")  # int8, fp16, conv2d stay


def normalise(line: str) -> str:
    """``line`` with what varies between trials of the same bug masked: file paths
    ("<path>"), addresses ("<address>"), long hexadecimal ids and numbers ("#"; digits inside a
    name such as ``int8`` or ``conv2d`` stay), whitespace collapsed.

    Example:
        >>> normalise("rank 1: RuntimeError: shape [128, 64] at 0x7f3a in /tmp/x1/y.py")
        'rank #: RuntimeError: shape [#, #] at <address> in <path>'
    """
    text = _PATH.sub("<path>", line)
    text = _ADDRESS.sub("<address>", text)
    text = _HEX_ID.sub("#", text)
    text = _NUMBER.sub("#", text)
    return " ".join(text.split())[:300]


def signature(failure_class: str | None, message: str | None) -> Signature | None:
    """The signature of a failure, or None when it is not learned from (another class, or
    no message to tell one bug from another)."""
    if failure_class not in LEARNED_CLASSES:
        return None
    line = normalise(first_line(message, 1000))
    return (failure_class, line) if line else None


def is_known_failure(record: TrialRecord) -> bool:
    """Whether ``record`` is a proposal skipped as a known failure (for counting them)."""
    return record.state == "skipped" and (record.failure_message or "").startswith(REASON)


def _same(a: Any, b: Any) -> bool:
    return a == b and type(a) is type(b)  # True is not 1


def _has(values: dict[str, Any], pairs: dict[str, Any]) -> bool:
    return all(k in values and _same(values[k], v) for k, v in pairs.items())


@dataclass(frozen=True)
class Failure:
    """A trial that failed with a signature: its number, configuration and first line."""

    number: int
    config: TrialConfig
    line: str  # as it was, for the reason


@dataclass
class KnownFailures:
    """The failures learned from so far, by signature, and the configurations that
    completed (a completed one with every suspect pair clears them)."""

    baseline: TrialConfig
    failed: dict[Signature, list[Failure]] = field(default_factory=dict)
    completed: list[dict[str, Any]] = field(default_factory=list)
    rules: dict[Signature, dict[str, Any]] = field(default_factory=dict)  # signature -> its suspects

    def add(self, record: TrialRecord) -> str | None:
        """Learn from one finished trial. Returns a note when this learns a rule or
        changes one (its suspects), else None."""
        if record.config is None:
            return None
        if record.state in ("complete", "probed"):
            self.completed.append(record.config.to_dict())
            self.rules = {sig: s for sig, s in self.rules.items() if not _has(self.completed[-1], s)}
            return None
        sig = signature(record.failure_class, record.failure_message) if record.state == "failed" else None
        if sig is None:
            return None
        self.failed.setdefault(sig, []).append(
            Failure(record.number, record.config, first_line(record.failure_message, 200)))
        before, after = self.rules.pop(sig, {}), self.suspects(sig)
        if after:
            self.rules[sig] = after
        if not after or after == before:
            return None
        them = "it" if len(after) == 1 else "all of them"
        return f"learned: {self.describe(sig)}; configurations with {them} are skipped from now on (not counted)"

    def learn(self, records: Iterable[TrialRecord]) -> None:
        """Learn from stored trials (a resumed study), in the order they were numbered."""
        for r in sorted(records, key=lambda r: r.number):
            self.add(r)

    def suspects(self, sig: Signature) -> dict[str, Any]:
        """The knob=value pairs every trial failing with ``sig`` has, its values not the
        baseline's; empty when nothing is learned (see the module's rule)."""
        failures = self.failed.get(sig, [])
        if len({f.config.key() for f in failures}) < 2:
            return {}
        base = self.baseline.to_dict()
        values = [f.config.to_dict() for f in failures]
        common = {k: v for k, v in values[0].items()
                  if not (k in base and _same(base[k], v)) and all(k in o and _same(o[k], v) for o in values[1:])}
        if not common or any(_has(done, common) for done in self.completed):
            return {}
        return common

    def describe(self, sig: Signature) -> str:
        """'quantization=qat_int8 with channels_last=True failed in trials 4 and 9 with the
        same error: RuntimeError: ...'"""
        pairs = [f"{k}={v}" for k, v in self.rules[sig].items()]
        what = pairs[0] + (" with " + " and ".join(pairs[1:]) if len(pairs) > 1 else "")
        failures = self.failed[sig]
        numbers = [str(f.number) for f in failures]
        trials = ", ".join(numbers[:-1]) + " and " + numbers[-1]
        return f"{what} failed in trials {trials} with the same {_WHAT[sig[0]]}: {failures[0].line}"

    def reason(self, config: TrialConfig) -> tuple[str, str] | None:
        """Why ``config`` would fail like earlier trials, and the class it would fail
        with; None when nothing says so."""
        values = config.to_dict()
        for sig, suspects in self.rules.items():
            if _has(values, suspects):
                return REASON + self.describe(sig), sig[0]
        return None
