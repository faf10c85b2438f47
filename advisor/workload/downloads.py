"""Downloads: model.py may fetch weights and data (``from_pretrained("name")``,
``download=True``, a URL of its own). The preflight calls model() and datasets() once in
the driver, each bounded in time (``preflight_limit``), so that the caches fill there; trials
then start with the libraries' offline switches set (``offline_env``), so that a trial reads
the caches and never fetches again."""

from __future__ import annotations

import os
from collections.abc import Mapping

# The offline switches of the libraries model.py files use to fetch: huggingface_hub (and
# through it transformers, which reads TRANSFORMERS_OFFLINE as well; both read at import),
# and datasets.
OFFLINE_SWITCHES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")

PREFLIGHT_HINT = ("a download that hangs? The first run fetches weights and data here, once, before the "
                  "study; set $ADVISOR_PREFLIGHT_TIMEOUT (seconds) to wait longer")


def offline_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The switches a trial starts with: each of ``OFFLINE_SWITCHES`` set to "1", or none at
    all when the user set any of them (``HF_HUB_OFFLINE=0``: trials may fetch).

    Example:
        >>> offline_env({})["HF_HUB_OFFLINE"]
        '1'
        >>> offline_env({"HF_HUB_OFFLINE": "0"})
        {}
    """
    environ = os.environ if environ is None else environ
    if any(name in environ for name in OFFLINE_SWITCHES):
        return {}
    return dict.fromkeys(OFFLINE_SWITCHES, "1")


def trial_switches(ray_address: str | None, fetched: bool = True) -> dict[str, str]:
    """What the trials of ``advisor tune``, ``confirm`` and ``measure`` start with beyond the
    driver's environment: ``offline_env()`` once a preflight has ``fetched`` into this
    machine's caches; nothing on a Ray cluster (``ray_address``: the other nodes' caches
    were not filled, their first trial fetches) nor when nothing was fetched
    (``--skip-preflight``).

    Example:
        >>> trial_switches("10.0.0.2:6379"), trial_switches(None, fetched=False)
        ({}, {})
    """
    return offline_env() if fetched and not ray_address else {}
