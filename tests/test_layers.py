"""The house in layers (docs/layout.md, docs/architecture.md), kept by walking every module's imports with
``ast``: imports inside functions and under ``TYPE_CHECKING`` count too.

    core < machine, workload < techniques < trial < search, runner < study < outputs < api, tui < cli

Each package imports only packages below it (``search_spaces``, data only, sits with
core); packages on the same floor never import each other; nothing imports ``cli`` but
``advisor/__main__.py``; the engine never imports the explorer (only ``cli`` starts it) or
textual; core imports no heavy library at all, and torch, ray, optuna and textual are
never imported at a module's top level (``advisor --help`` and ``import advisor`` stay
fast), except by the explorer, which only ``advisor tui`` and the live view load. No
import circles, within packages either, nor among the subpackages of a package (``study``'s
``options``, ``storage``, ``confirmation``, ``run``, ``doctor``). A module whose name
starts with an underscore is its package's own: nothing outside that package imports it;
and a subpackage whose ``__init__`` lists its modules in ``__all__`` is imported from
outside only through those.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import REPO

# package -> floor; the explorer and the presets live in top-level folders but install as
# advisor.tui and advisor.search_spaces
FLOORS = {"core": 0, "search_spaces": 0, "machine": 1, "workload": 1, "techniques": 2, "trial": 3,
          "search": 4, "runner": 4, "study": 5, "outputs": 6, "api": 7, "tui": 7, "cli": 8}
SOURCES = {"advisor": REPO / "advisor", "advisor.tui": REPO / "tui", "advisor.search_spaces": REPO / "search_spaces"}
HEAVY = ("torch", "torchao", "ray", "optuna", "textual", "textual_plotext")


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module (or package)
    where: str  # file:line
    top_level: bool  # at module level and not under TYPE_CHECKING


def modules() -> dict[str, Path]:
    found = {}
    for prefix, root in SOURCES.items():
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join([prefix, *parts])
            found[name] = path
    return found


MODULES = modules()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def imports_of(name: str, path: Path) -> list[Import]:
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.extend(Import(name, a.name, f"{_shown(path)}:{child.lineno}", top) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.rsplit(".", child.level - 1)[0] if child.level > 1 else package
                    base = f"{anchor}.{base}".rstrip(".")
                where = f"{_shown(path)}:{child.lineno}"
                for alias in child.names:  # `from advisor import search_spaces` imports a module
                    sub = f"{base}.{alias.name}"
                    found.append(Import(name, sub if sub in MODULES else base, where, top))
            elif isinstance(child, ast.If) and _is_type_checking(child):
                visit(child, False)
            else:
                visit(child, top and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))

    visit(tree, True)
    return found


IMPORTS = [i for name, path in MODULES.items() for i in imports_of(name, path)]


def package_of(module: str) -> str | None:
    """'advisor.search.space' -> 'search'; the top-level face and __main__ have none."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in FLOORS else None


def test_every_module_belongs_to_a_known_package():
    strays = [m for m in MODULES if package_of(m) is None and m not in ("advisor", "advisor.__main__")]
    assert not strays, f"modules outside the layer table: {strays}"


def test_imports_go_down_the_layers():
    problems = layer_problems(IMPORTS)
    assert not problems, "\n".join(problems)


def layer_problems(imports: list[Import]) -> list[str]:
    problems = []
    for i in imports:
        if not i.target.startswith("advisor"):
            continue
        src, dst = package_of(i.source), package_of(i.target)
        if i.source == "advisor.__main__" and dst == "cli":
            continue  # the entry point
        if dst is None:
            problems.append(f"{i.where}: {i.source} imports the public face {i.target!r} (import the module instead)")
        elif src is None:
            if FLOORS[dst] > FLOORS["techniques"] and dst != "api":
                problems.append(f"{i.where}: the public face imports {i.target} (above techniques; only "
                                "advisor.api, the Python API, sits higher)")
        elif src == dst:
            continue  # within a package: only circles are forbidden (below)
        elif FLOORS[dst] > FLOORS[src]:
            problems.append(f"{i.where}: {i.source} ({src}, floor {FLOORS[src]}) imports {i.target} "
                            f"({dst}, floor {FLOORS[dst]}): up a layer")
        elif FLOORS[dst] == FLOORS[src]:
            problems.append(f"{i.where}: {i.source} ({src}) imports {i.target} ({dst}): sideways on floor {FLOORS[src]}")
    return problems


def test_nothing_imports_the_cli_and_the_engine_never_imports_the_explorer():
    problems = []
    for i in IMPORTS:
        src, dst = package_of(i.source), package_of(i.target)
        if dst == "cli" and src != "cli" and i.source != "advisor.__main__":
            problems.append(f"{i.where}: {i.source} imports the command line ({i.target})")
        if dst == "tui" and src not in ("tui", "cli"):
            problems.append(f"{i.where}: {i.source} imports the explorer ({i.target})")
        if i.target.split(".")[0] in ("textual", "textual_plotext") and src != "tui":
            problems.append(f"{i.where}: {i.source} imports {i.target}")
    assert not problems, "\n".join(problems)


def test_heavy_libraries_stay_out_of_core_and_out_of_top_levels():
    problems = heavy_problems(IMPORTS)
    assert not problems, "\n".join(problems)


def heavy_problems(imports: list[Import]) -> list[str]:
    problems = []
    for i in imports:
        root = i.target.split(".")[0]
        if root not in HEAVY:
            continue
        if package_of(i.source) in ("core", "search_spaces"):
            problems.append(f"{i.where}: {i.source} imports {i.target}: core imports no heavy library")
        elif i.top_level and package_of(i.source) != "tui":
            problems.append(f"{i.where}: {i.source} imports {i.target} at its top level (import it where used)")
    return problems


def test_no_import_circles():
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for i in IMPORTS:
        if i.target in MODULES and i.target != i.source:
            graph[i.source].add(i.target)
    circles = _strongly_connected(graph)
    assert not circles, "import circles:\n" + "\n".join(" -> ".join(sorted(c)) for c in circles)


def subpackage_of(module: str) -> str | None:
    """'advisor.study.run._ledger' -> 'advisor.study.run': the subpackage of a package that
    holds the module (a package's own top-level modules and the packages themselves: None)."""
    for length in range(len(module.split(".")), 2, -1):
        name = ".".join(module.split(".")[:length])
        if name in MODULES and MODULES[name].name == "__init__.py" and name.count(".") == 2:
            return name
    return None


SUBPACKAGES = sorted({s for m in MODULES if (s := subpackage_of(m))})


def subpackage_graph(imports: list[Import]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {s: set() for s in SUBPACKAGES}
    for i in imports:
        src, dst = subpackage_of(i.source), subpackage_of(i.target)
        if src and dst and src != dst:
            graph.setdefault(src, set()).add(dst)
            graph.setdefault(dst, set())
    return graph


def test_the_subpackages_form_no_circle():
    """study's subpackages (and the explorer's) import each other one way only: the
    options and the storage, then confirmation, then the run (docs/architecture.md)."""
    assert {"advisor.study.options", "advisor.study.storage", "advisor.study.confirmation", "advisor.study.run",
            "advisor.study.doctor"} <= set(SUBPACKAGES)
    circles = _strongly_connected(subpackage_graph(IMPORTS))
    assert not circles, "subpackages in a circle:\n" + "\n".join(" -> ".join(sorted(c)) for c in circles)


def declared_modules(package: str) -> set[str] | None:
    """The names in a package's ``__all__`` (None when it has none)."""
    tree = ast.parse(MODULES[package].read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return None


def privacy_problems(imports: list[Import]) -> list[str]:
    problems = []
    for i in imports:
        if not i.target.startswith("advisor."):
            continue
        parts = i.target.split(".")
        for n, part in enumerate(parts):
            owner = ".".join(parts[:n])
            if part.startswith("_") and not part.startswith("__") and not (
                    i.source == owner or i.source.startswith(owner + ".")):
                problems.append(f"{i.where}: {i.source} imports {i.target}, which is {owner}'s own")
                break
        sub = subpackage_of(i.target)
        if sub and sub != i.target and not (i.source == sub or i.source.startswith(sub + ".")):
            listed = declared_modules(sub)
            name = i.target.removeprefix(sub + ".").split(".")[0]
            if listed is not None and name not in listed:
                problems.append(f"{i.where}: {i.source} imports {i.target}, which {sub}.__all__ does not name")
    return problems


def test_private_modules_stay_in_their_package():
    problems = privacy_problems(IMPORTS)
    assert not problems, "\n".join(problems)


def test_each_study_subpackage_says_what_it_holds():
    for sub in (s for s in SUBPACKAGES if s.startswith("advisor.study.")):
        tree = ast.parse(MODULES[sub].read_text())
        assert ast.get_docstring(tree), f"{sub}: no docstring saying what it holds"
        listed = declared_modules(sub)
        assert listed, f"{sub}: no __all__ naming what other packages may use"
        own = {m.rsplit(".", 1)[1] for m in MODULES if m.startswith(sub + ".")}
        assert listed <= own, f"{sub}.__all__ names modules it does not hold: {sorted(listed - own)}"
        assert not {m for m in own - listed if not m.startswith("_")}, \
            f"{sub}: modules neither in __all__ nor private: {sorted(own - listed)}"


def _strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm: the components with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[set[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(component)

    for v in graph:
        if v not in index:
            connect(v)
    return out


# ---- the checker itself: it must catch what it is for ---------------------------------

@pytest.mark.parametrize("source, text, wanted", [
    ("advisor.core.fake", "from advisor.study.storage import stores\n", "up a layer"),
    ("advisor.machine.fake", "def f():\n    from advisor.workload.contract import forward\n", "sideways"),
    ("advisor.trial.fake", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from advisor.search.space import X\n",
     "up a layer"),
    ("advisor.core.fake", "def f():\n    import torch\n", "core imports no heavy library"),
    ("advisor.study.fake", "import optuna\n", "at its top level"),
])
def test_the_checker_catches_a_bad_import(tmp_path, source, text, wanted):
    probe = tmp_path / "probe.py"
    probe.write_text(text)
    found = imports_of(source, probe)
    messages = layer_problems(found) + heavy_problems(found)
    assert any(wanted in m and "probe.py:" in m for m in messages), messages


@pytest.mark.parametrize("source, text", [
    ("advisor.outputs.fake", "from advisor.study.run._ledger import Ledger\n"),
    ("advisor.study.confirmation.fake", "def f():\n    from advisor.study.run import _parts\n"),
])
def test_the_checker_catches_a_private_import(tmp_path, source, text):
    probe = tmp_path / "probe.py"
    probe.write_text(text)
    messages = privacy_problems(imports_of(source, probe))
    assert any("own" in m and "probe.py:" in m for m in messages), messages
    assert not privacy_problems(imports_of("advisor.study.run.fake", probe))


def test_the_checker_finds_subpackages_in_a_circle():
    found = [Import("advisor.study.run.tuner", "advisor.study.confirmation.confirm", "x:1", True),
             Import("advisor.study.confirmation.confirm", "advisor.study.run.plan", "x:2", False)]
    assert _strongly_connected(subpackage_graph(found)) == [{"advisor.study.run", "advisor.study.confirmation"}]


def test_the_checker_finds_a_circle():
    assert _strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    assert _strongly_connected({"a": {"b"}, "b": set()}) == []
