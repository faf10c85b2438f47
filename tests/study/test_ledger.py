"""The ledger is the only writer of a study's trials (advisor/study/run/_ledger.py), and the
strategy and the accuracy queue only decide. Kept by walking every module's calls with
``ast``: a second place that tells Optuna a trial is over, asks for a trial or writes a
trial's attributes fails here, naming it. (The decisions themselves are tested on real
studies: tests/study/test_training_queue.py, tests/search/test_known_failures.py.)"""

from __future__ import annotations

import ast

from test_layers import MODULES

WRITERS = {"advisor.study.run._ledger", "advisor.study.run._trial_writes"}
STORAGE = "advisor.study.storage.guard"  # the storage's own retrying wrapper: it is the storage, not a writer
# Optuna calls that create, queue, end or write a trial (study attributes are not trials')
TRIAL_WRITES = {"ask", "enqueue_trial", "set_constraint", "set_trial_user_attr", "set_trial_system_attr",
                "set_trial_state_values", "tell"}


def calls(attr_names: set[str]) -> list[tuple[str, str, str, int]]:
    """(module, enclosing function, receiver source, line) of every ``x.name(...)`` call."""
    found = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in attr_names):
                    found.append((module, fn.name, ast.unparse(node.func.value), node.lineno, node.func.attr))
    return found


def is_ledger(receiver: str) -> bool:
    return receiver in ("self.ledger", "ledger")


def test_one_place_tells_optuna_a_trial_is_over():
    tells = {(m, fn) for m, fn, receiver, _, _ in calls({"tell"}) if not is_ledger(receiver)}
    assert tells == {("advisor.study.run._trial_writes", "tell_trial")}


def test_only_the_ledger_asks_for_and_writes_trials():
    writes = [(m, fn, receiver, line, name) for m, fn, receiver, line, name in calls(TRIAL_WRITES | {"set_user_attr"})
              if not is_ledger(receiver) and not (name == "set_user_attr" and receiver.endswith("study"))]
    outside = [w for w in writes if w[0] not in WRITERS | {STORAGE}]
    assert not outside, f"trials written outside the ledger: {outside}"


def test_the_strategy_and_the_queue_import_no_storage():
    """They decide from records (``TrialRecord``, ``StoredStudy``) and never write: no
    optuna, no attribute writers, no reading a study themselves."""
    readers_and_writers = {"config_attrs", "result_attrs", "skipped_attrs", "read_trial", "read_study"}
    for module in ("advisor.search.strategy", "advisor.study.run._training_queue"):
        tree = ast.parse(MODULES[module].read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                assert not any(a.name.split(".")[0] == "optuna" for a in node.names), module
            elif isinstance(node, ast.ImportFrom):
                assert (node.module or "").split(".")[0] != "optuna", module
                assert not {a.name for a in node.names} & readers_and_writers, (module, node.module)
                imported = {node.module or ""} | {f"{node.module}.{a.name}" for a in node.names}
                assert not any(m == "advisor.study.storage" or m.startswith("advisor.study.storage.")
                               or m == "advisor.study.run._trial_writes" for m in imported), module
