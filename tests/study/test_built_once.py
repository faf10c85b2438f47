"""The Tuner is built once (issue 28): what a run holds is fixed when its study is open
(``RunContext``, frozen), the driver loop's steps are built from it, nothing is assigned
onto a collaborator from outside (as ``Parts.watch`` and ``tuner.emit`` once were), and
no callable is threaded through for halting (as ``lambda: self.halt`` once was): waits
read the one ``Stop`` (advisor/core/stop.py). Kept by walking the modules with ``ast``,
in the style of tests/study/test_ledger.py; the run itself is tested end to end by
tests/study/test_tuner.py and the studies beside it."""

from __future__ import annotations

import ast
import dataclasses

import pytest
from test_layers import MODULES

from advisor.study.run._run_context import RunContext

# the modules that build and run a study's driver loop
RUN = ("advisor.study.run.tuner", "advisor.study.run._run_context", "advisor.study.run._study_run",
       "advisor.study.run._parts", "advisor.study.run.background")
# per class of those: the attributes its own methods may change after __init__ (its own
# progress, never a collaborator)
CHANGES = {
    "Tuner": {"executor", "_study_run"},  # the executor started on demand; the run, once open
    # confirming: as --budget sizes it; space_exhausted: as ended, why no more trials start
    "StudyRun": {"ended", "space_exhausted", "pending", "deadline", "deadline_why", "confirming"},
    "Parts": set(),
    "RunContext": set(),
    "StudyOutcome": set(),
    "BackgroundTune": {"storage", "done", "outcome", "error", "_thread", "_listener"},
}


def _tree(module: str) -> ast.Module:
    return ast.parse(MODULES[module].read_text(), str(MODULES[module]))


def _assigned(node: ast.AST) -> list[ast.expr]:
    """The targets ``node`` stores into (tuples unpacked)."""
    targets = (node.targets if isinstance(node, ast.Assign)
               else [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
    out: list[ast.expr] = []
    while targets:
        t = targets.pop()
        if isinstance(t, (ast.Tuple, ast.List)):
            targets += t.elts
        elif isinstance(t, ast.Starred):
            targets.append(t.value)
        else:
            out.append(t)
    return out


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def test_the_run_context_is_frozen():
    assert dataclasses.is_dataclass(RunContext) and RunContext.__dataclass_params__.frozen
    context = RunContext(*[None] * len(dataclasses.fields(RunContext)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        context.parts = None  # type: ignore[misc]
    assert not {f.name for f in dataclasses.fields(RunContext)} & CHANGES["StudyRun"], \
        "a collaborator of the run is listed as something the loop changes"


def test_nothing_is_assigned_onto_another_object():
    """``x.attr = ...`` only on ``self`` itself: never ``self.parts.watch = ...``, never
    onto a collaborator held in a local name, never through setattr."""
    found = []
    for module in RUN:
        for node in ast.walk(_tree(module)):
            for target in _assigned(node):
                if isinstance(target, ast.Attribute) and not _is_self(target.value):
                    found.append(f"{module}:{node.lineno}: {ast.unparse(target)} = ...")
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith(("setattr", "__setattr__")):
                found.append(f"{module}:{node.lineno}: {ast.unparse(node.func)}(...)")
    assert not found, "assigned from outside the object:\n" + "\n".join(found)


def test_each_object_of_the_run_is_built_in_its_constructor():
    """A class of the run assigns its attributes in ``__init__``; afterwards only its own
    progress (``CHANGES``) changes: no collaborator is set later, in ``run()`` or a step."""
    found, seen = [], set()
    for module in RUN:
        for cls in (n for n in ast.walk(_tree(module)) if isinstance(n, ast.ClassDef)):
            assert cls.name in CHANGES, f"{module}.{cls.name}: say what it may change after __init__ (CHANGES)"
            seen.add(cls.name)
            for fn in (n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
                if fn.name == "__init__":
                    continue
                for node in ast.walk(fn):
                    for target in _assigned(node):
                        if (isinstance(target, ast.Attribute) and _is_self(target.value)
                                and target.attr not in CHANGES[cls.name]):
                            found.append(f"{module}:{node.lineno}: {cls.name}.{fn.name} sets self.{target.attr}")
    assert seen == set(CHANGES)
    assert not found, "set after construction:\n" + "\n".join(found)


def test_no_callable_is_threaded_through_for_halting():
    """What stops a wait is the ``Stop`` object: a parameter named for stopping is a
    ``Stop``, and no lambda hands out the Tuner's halt or stop reason."""
    found = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                a = node.args
                for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs]:
                    if arg.arg in ("stop", "stopping", "halt", "should_stop") and not isinstance(node, ast.Lambda):
                        shown = ast.unparse(arg.annotation) if arg.annotation is not None else "(none)"
                        if shown not in ("Stop", "Stop | None"):
                            found.append(f"{module}:{node.lineno}: {node.name}({arg.arg}: {shown})")
            if isinstance(node, ast.Lambda):
                names = {n.attr for n in ast.walk(node.body) if isinstance(n, ast.Attribute)}
                names |= {n.id for n in ast.walk(node.body) if isinstance(n, ast.Name)}
                if names & {"halt", "stop_reason", "_stopping", "halted", "reason"}:
                    found.append(f"{module}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "halting through a callable instead of advisor.core.stop.Stop:\n" + "\n".join(found)
