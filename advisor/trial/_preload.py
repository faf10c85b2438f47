"""Imported by the trial fork server (advisor/trial/forkserver.py) at its start: imports the modules
named in ADVISOR_PRELOAD, so that every trial forked from it starts with them loaded. A
module that fails to import is left to the trial, which then reports the error itself."""

from __future__ import annotations

import importlib
import os

for _name in filter(None, os.environ.get("ADVISOR_PRELOAD", "").split(",")):
    try:
        importlib.import_module(_name)
    except Exception:  # noqa: BLE001 - the trial imports it again and reports the failure
        pass
