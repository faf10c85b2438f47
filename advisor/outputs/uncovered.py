"""What an export to another tool's terms (transformers' ``TrainingArguments``, an
accelerate config, a torchrun line) leaves out: each knob that differs from the plain
setup and has no equivalent there, with how to apply it anyway: ``advisor.apply()`` on
the model, or the plain-PyTorch lines it runs."""

from __future__ import annotations

from typing import Any

from advisor.core.config import TrialConfig
from advisor.techniques.registry import TECHNIQUES

APPLY = "advisor.apply(model, {knobs}, device='cpu') before handing the model over (the tool moves it)"
# knobs that act on the distributed wrapper (DDP, FSDP, a mesh): advisor.apply() sets them only
# when it wraps the model itself, which it does not where another tool wraps it
WRAPPER = {"comm_hook", "bucket_mb", "ddp_bucket_view", "ddp_static_graph", "sync_batchnorm", "fsdp_mixed_precision",
           "fsdp_reshard", "tp_size", "pp_schedule", "pp_microbatches", "pp_balance"}
# knobs advisor.apply() sets in its own training step (prepared.train_step), which another
# tool's loop does not run: said by hand only
STEP = {"fused_optimizer", "compile_optimizer", "sdpa_backend"}


def changed_knobs(config: TrialConfig) -> dict[str, Any]:
    """The knobs whose value differs from the plain setup, with the companions that only
    mean something beside another (prune_amount with pruning, compile_mode with compile)."""
    changed = config.changed()
    if config.pruning != "none":
        changed["prune_amount"] = config.prune_amount
    if not config.compile:
        changed.pop("compile_mode", None)
    return changed


def not_covered(config: TrialConfig, covered: set[str], target: str,
                how: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """One entry per changed knob outside ``covered``: ``{"knob", "value", "how"}``.

    ``how`` overrides the generic advice for a knob (a tool-specific way, such as an
    environment variable); the generic advice names ``advisor.apply()`` and the plain
    PyTorch lines of the knob's technique.
    """
    how = how or {}
    entries = []
    for key, value in changed_knobs(config).items():
        if key in covered:
            continue
        text = how.get(key)
        if text is None:
            by_hand = _by_hand(config, key, value)
            if key in WRAPPER:
                text = (f"no {target} equivalent, and the tool wraps the model itself: on its wrapper, by hand"
                        + (f": {by_hand}" if by_hand else "") + " (or train with the script advisor export "
                        "--format python writes, under torchrun)")
            elif key in STEP:
                text = (f"no {target} equivalent, and advisor.apply() sets it in its own training step only, which "
                        f"the tool does not run: by hand" + (f": {by_hand}" if by_hand else ""))
            else:
                text = (f"no {target} equivalent: " + APPLY.format(knobs=f"{{{key!r}: {value!r}}}")
                        + (f"; by hand: {by_hand}" if by_hand else ""))
        entries.append({"knob": key, "value": value, "how": text})
    return entries


def _by_hand(config: TrialConfig, key: str, value: Any) -> str:
    """The technique's plain-PyTorch lines on one line, where they are short (two lines of
    code at most); longer recipes are in the python export's plain-PyTorch block."""
    snippet = (TECHNIQUES[key].snippet(value) or "").replace("AMOUNT", f"{config.prune_amount:g}")
    code = [line.split("  #")[0].strip() for line in snippet.splitlines()
            if line.strip() and not line.strip().startswith("#")]
    if len(code) > 2:
        return "the plain-PyTorch lines at the end of advisor export --format python"
    return "; ".join(code)


def kept_for_apply(config: TrialConfig, covered: set[str]) -> dict[str, Any]:
    """The changed knobs that ``advisor.apply()`` should still set (those ``covered``
    leaves out, and not the wrapper's or the step's), as the mapping ``apply`` takes."""
    return {k: v for k, v in changed_knobs(config).items() if k not in covered and k not in WRAPPER | STEP}


def comment_lines(entries: list[dict[str, Any]], prefix: str = "# ") -> list[str]:
    """The not-covered entries as comment lines (YAML, shell and Python comments alike)."""
    if not entries:
        return [f"{prefix}every changed knob is covered above"]
    lines = [f"{prefix}not covered here ({len(entries)} knob{'s' if len(entries) != 1 else ''}):"]
    for entry in entries:
        lines.append(f"{prefix}  {entry['knob']}={entry['value']!r}: {entry['how']}")
    return lines
