"""The modules beside model.py that it imports, as part of what a study measured.

A study is resumed only with the model it started with (``advisor.study.run.plan``
compares model.py's sha256). A model.py that builds its network from a helper module next
to it (``from blocks import Block``) changes when that module changes, though model.py's
own text does not: a user who widened a layer in the helper resumed the study and saw the
new model ranked against the old baseline. ``local_modules`` names those modules (found in
model.py's source, and in theirs in turn) with the sha256 of each file, so a resume can
say which one changed.

Only modules that live under model.py's folder count, and never what is installed there (a
virtual environment's site-packages, say): installed libraries are the environment's, not
the model's. A local package counts with every ``.py`` file under it, up to ``MAX_FILES``.
The source is read, never imported: a module imported inside a function counts too.
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

MAX_FILES = 500  # files hashed at most (a project folder with a large package of its own)
INSTALLED = ("site-packages", "dist-packages")


def imported_names(source: str, anywhere: bool = True) -> list[str]:
    """Every absolute module name ``source`` imports (``import a.b``, ``from a.b import c``),
    anywhere in it or, without ``anywhere``, at its top level only; in order; [] when it
    does not parse.

    Example:
        >>> imported_names("import torch\\ndef f():\\n    from blocks import Block\\n")
        ['torch', 'blocks']
    """
    tree = _parsed(source)
    names: list[str] = []
    for node in (ast.walk(tree) if anywhere else tree.body) if tree is not None else ():
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return list(dict.fromkeys(names))


def imported_from(source: str) -> list[tuple[str, str]]:
    """``(module, name)`` for each name ``source``'s top level takes from an absolute module
    (``from a.b import c``); [] when it does not parse.

    Example:
        >>> imported_from("from transformers import GPT2Config, GPT2LMHeadModel as M\\nfrom . import x")
        [('transformers', 'GPT2Config'), ('transformers', 'GPT2LMHeadModel')]
    """
    tree = _parsed(source)
    return [(node.module, alias.name) for node in (tree.body if tree is not None else ())
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
            for alias in node.names if alias.name != "*"]


def _parsed(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except SyntaxError:
        return None


def _local_files(name: str, folder: Path) -> list[Path]:
    """The files of module ``name`` (its top-level part) if it lives in ``folder``."""
    top = name.split(".")[0]
    single, package = folder / f"{top}.py", folder / top
    if single.is_file():
        return [single]
    if (package / "__init__.py").is_file() or (package.is_dir() and any(package.glob("*.py"))):
        return sorted(p for p in package.rglob("*.py")
                      if not any(part in INSTALLED or part.startswith(".") for part in p.relative_to(folder).parts))
    return []


def local_modules(model_py: Path, source: str) -> dict[str, str]:
    """``{path relative to model.py's folder: sha256}`` of every module beside model.py that
    it imports, directly or through another such module (model.py itself left out)."""
    folder = model_py.resolve().parent
    if any(part in INSTALLED for part in folder.parts):
        return {}
    found: dict[str, str] = {}
    pending = [source]
    while pending and len(found) < MAX_FILES:
        for name in imported_names(pending.pop()):
            for path in _local_files(name, folder):
                key = path.relative_to(folder).as_posix()
                if key in found or path.resolve() == model_py.resolve() or len(found) >= MAX_FILES:
                    continue
                try:
                    data = path.read_bytes()
                except OSError:
                    continue
                found[key] = hashlib.sha256(data).hexdigest()
                if path.suffix == ".py":
                    pending.append(data.decode("utf-8", errors="replace"))
    return dict(sorted(found.items()))
