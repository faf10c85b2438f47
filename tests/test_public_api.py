"""The public API: what ``advisor.__all__`` promises, and that every error a public
function raises is an ``AdvisorError`` listed there."""

from __future__ import annotations

import subprocess
import sys

import pytest

import advisor
from advisor.core import errors


def test_every_public_name_resolves():
    for name in advisor.__all__:
        assert getattr(advisor, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        advisor.nope  # noqa: B018


def test_every_error_class_is_public_and_an_advisor_error():
    defined = {n for n, v in vars(errors).items() if isinstance(v, type) and issubclass(v, Exception)}
    assert defined <= set(advisor.__all__)
    for name in defined:
        cls = getattr(advisor, name)
        assert issubclass(cls, advisor.AdvisorError) and cls.__doc__, name
        assert cls.exit_code in (1, 2), name


def test_import_advisor_loads_no_heavy_library():
    code = ("import sys, advisor; advisor.TrialConfig; advisor.load_config; "
            "print(sorted(m for m in ('torch', 'ray', 'optuna', 'textual') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_all_lists_exactly_the_lazy_names():
    from advisor import _PUBLIC

    assert set(advisor.__all__) == {*_PUBLIC, "__version__"}
