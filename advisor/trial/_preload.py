"""Imported by the trial fork server (advisor/trial/forkserver.py) at its start: imports the modules
named in ADVISOR_PRELOAD, and looks up the names given as "module:name" (a library that
imports its parts lazily imports them then), so that every trial forked from it starts with
them loaded. A module or name that fails is left to the trial, which then reports the error
itself."""

from __future__ import annotations

import importlib
import os

for _name in filter(None, os.environ.get("ADVISOR_PRELOAD", "").split(",")):
    _module, _, _attribute = _name.partition(":")
    try:
        _found = importlib.import_module(_module)
        if _attribute and not hasattr(_found, _attribute):  # a lazy library imports it here
            importlib.import_module(f"{_module}.{_attribute}")  # or it is a submodule not imported yet
    except Exception:  # noqa: BLE001 - the trial imports it again and reports the failure
        pass
