"""optuna-dashboard reads a study as advisor writes it, probed-only trials (two-stage
evaluation: PRUNED, with their probe's figures as user attributes) included: its own web
API, called in this process through its WSGI app."""

from __future__ import annotations

import json

from dashboard_api import get

from advisor.study.storage import stores as st

from conftest import skip_without
from recorded_study import NAME, add_probed_trial, write_recorded_study

skip_without("optuna_dashboard")


def test_the_dashboard_api_reads_a_study_with_probed_trials(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    study = write_recorded_study(url)
    trial = add_probed_trial(study, "dominated by trial 1")
    storage = st.open_storage(url)
    from optuna_dashboard._app import create_app

    app = create_app(storage)
    study_id = storage.get_study_id_from_name(NAME)
    status, body = get(app, f"/api/studies/{study_id}")
    assert status.startswith("200"), body[:500]
    data = json.loads(body)
    trials = {t["number"]: t for t in data["trials"]}
    assert len(trials) == len(study.trials)
    probed = trials[trial.number]
    assert probed["state"] == "Pruned"
    attrs = {a["key"]: a["value"] for a in probed["user_attrs"]}
    assert attrs["accuracy_skipped"] == "dominated by trial 1" and "3000" in attrs["throughput"]
    assert trials[0]["state"] == "Complete" and len(trials[0]["values"]) == 3
    status, _ = get(app, f"/csv/{study_id}")
    assert status.startswith("200")
