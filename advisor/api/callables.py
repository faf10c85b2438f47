"""Callables passed to ``advisor.tune()`` as a model.py: each trial runs in a fresh process,
which imports them by module and name. A callable it could not import (a lambda, a
function defined inside another or in the script or notebook being run) is refused here,
before any process starts, saying what to do instead.

The model.py written is a few import lines (and the BASELINE), kept under the
directory given (``.advisor/`` by default) and named after the content, so the same
callables give the same file and a study resumes on it.
"""

from __future__ import annotations

import hashlib
import importlib
import sys
from pathlib import Path
from typing import Any

from advisor.core.errors import WorkloadError
from advisor.core.export_format import write_atomically
from advisor.workload.defaults import OUTPUT_LOSS

ROLES = ("model", "datasets", "loss", "metric", "optimizer")
MOVE_IT = ("define it at the top level of a module file (for example my_model.py next to your script or "
           "notebook) and import it from there: each trial runs in a fresh process, which imports it")


def reference(role: str, value: Any) -> tuple[str, str]:
    """(module, name) by which a fresh process imports ``value``; WorkloadError if it cannot."""
    if not callable(value):
        also = f', or "{OUTPUT_LOSS}" (the model returns its own loss)' if role == "loss" else ""
        raise WorkloadError(f"advisor.tune({role}=...): expected a function or class{also}, found "
                            f"{type(value).__name__} {value!r}"[:300])
    module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    what = f"advisor.tune({role}={getattr(value, '__name__', type(value).__name__)})"
    if not module or not qualname:
        raise WorkloadError(f"{what}: a {type(value).__name__} has no module and name to import it by; "
                            f"pass a function or class ({MOVE_IT})")
    if qualname.endswith("<lambda>"):
        raise WorkloadError(f"{what}: a lambda cannot be imported by a trial process; {MOVE_IT}")
    if "<locals>" in qualname:
        raise WorkloadError(f"{what}: {qualname} is defined inside a function; {MOVE_IT}")
    if module == "__main__":
        raise WorkloadError(f"{what}: {qualname} is defined in the script or notebook being run (__main__), which "
                            f"a trial process cannot import; {MOVE_IT}")
    if "." in qualname:
        raise WorkloadError(f"{what}: {qualname} is not at the top level of {module}; pass a top-level function or "
                            "class")
    try:
        found = getattr(importlib.import_module(module), qualname)
    except Exception as exc:  # the user's module: any failure to import it says so
        raise WorkloadError(f"{what}: importing {module}.{qualname} failed ({type(exc).__name__}: {exc})") from None
    if found is not value:
        raise WorkloadError(f"{what}: {module}.{qualname} is a different object now (redefined after import?); "
                            "re-import the module and pass the function again")
    return module, qualname


def _import_root(module: str) -> str | None:
    """The sys.path entry ``module`` was imported from (None for an installed one)."""
    file = getattr(sys.modules.get(module), "__file__", None)
    if file is None:
        return None
    path = Path(file).resolve()
    depth = module.count(".") + (1 if path.name == "__init__.py" else 0)
    root = path.parents[depth]
    return None if "site-packages" in root.parts or "dist-packages" in root.parts else str(root)


def workload_source(pieces: dict[str, Any], baseline: dict[str, Any] | None) -> str:
    """The text of a model.py that imports ``pieces`` (role -> callable, or "output.loss"
    for ``loss``) and sets BASELINE."""
    if baseline is not None and not isinstance(baseline, dict):
        raise WorkloadError(f"advisor.tune(baseline=...): expected a dict such as {{'batch_size': 64}}, "
                            f"found {type(baseline).__name__}")
    lines = ['"""Written by advisor.tune(): the model.py contract from the callables it was given."""', "",
             "import sys", ""]
    roots, imports = [], []
    for role in ROLES:
        value = pieces.get(role)
        if value is None:
            continue
        if role == "loss" and value == OUTPUT_LOSS:
            imports.append(f'LOSS = "{OUTPUT_LOSS}"')
            continue
        module, name = reference(role, value)
        root = _import_root(module)
        if root is not None and root not in roots:
            roots.append(root)
        imports.append(f"from {module} import {name} as {role}" if name != role else f"from {module} import {name}")
    lines += [f"if {root!r} not in sys.path:\n    sys.path.insert(0, {root!r})" for root in roots]
    lines += ["", *imports]
    if baseline:
        lines += ["", f"BASELINE = {baseline!r}"]
    return "\n".join(lines) + "\n"


def write_workload(pieces: dict[str, Any], baseline: dict[str, Any] | None, name: str,
                   directory: Path) -> tuple[Path, bool]:
    """Write the model.py for ``pieces`` as ``directory/NAME-HASH.py`` (kept if it exists);
    the path, and whether it was written now."""
    text = workload_source(pieces, baseline)
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    path = directory / f"{name}-{digest}.py"
    if path.exists():
        return path, False
    directory.mkdir(parents=True, exist_ok=True)
    write_atomically(path, text)
    return path, True
