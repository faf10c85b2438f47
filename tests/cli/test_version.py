"""`advisor --version`: the package's version, exit status 0, nothing heavy imported."""

from __future__ import annotations

import os
import subprocess
import sys

import advisor

from conftest import REPO


def test_version_prints_the_package_version_and_exits_0():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    code = "import sys\nfrom advisor.cli.main import main\ntry:\n    main(['--version'])\nexcept SystemExit as e:\n" \
           "    print('EXIT', e.code, sorted(m for m in ('torch', 'ray', 'optuna') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.splitlines() == [f"advisor {advisor.__version__}", "EXIT 0 []"]


def test_version_through_the_module_entry_point():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "advisor", "--version"], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0 and done.stdout == f"advisor {advisor.__version__}\n" and done.stderr == ""


def test_the_version_is_the_one_pyproject_declares():
    import re

    declared = re.search(r'^version = "(.+)"$', (REPO / "pyproject.toml").read_text(), re.MULTILINE)
    assert declared and declared.group(1) == advisor.__version__


def test_the_command_exits_with_its_status_and_a_frozen_heap(tmp_path):
    """``advisor`` (the console script and ``python -m advisor``) is ``entry``: ``main``'s
    status becomes the exit status, its output is all there, and the heap is frozen before
    the interpreter's exit (its last full collection took 1.0-1.5 s after `advisor tune`)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    code = ("import atexit, gc, sys\nfrom advisor.cli.main import entry\n"
            "atexit.register(lambda: print('FROZEN', gc.get_freeze_count() > 0, flush=True))\n"
            "sys.argv = ['advisor', *sys.argv[1:]]\nentry()\n")
    done = subprocess.run([sys.executable, "-c", code, "spaces"], capture_output=True, text=True, env=env,
                          cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr
    assert "default" in done.stdout and done.stdout.rstrip().endswith("FROZEN True")
    bad = subprocess.run([sys.executable, "-c", code, "studies", "--storage", f"sqlite:///{tmp_path / 'none.db'}"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, check=False)
    assert bad.returncode == 2 and "does not exist" in bad.stderr and bad.stdout.strip() == "FROZEN True"
    assert not (tmp_path / "none.db").exists()
