"""A stored study with fixed figures, for tests whose output must not depend on timing
(TUI snapshots, report text). It is written to real Optuna storage through the same
``record_result`` the search strategy stores every trial with; only the measured numbers
are made up (named as such: a real trial's figures vary from run to run), so screenshots
stay stable.
"""

from __future__ import annotations

from typing import Any

import optuna

from advisor.core.config import TrialConfig
from advisor.core.objectives import DIRECTIONS, OBJECTIVES, Limits
from advisor.core.results import TrialResult
from advisor.study.run._ledger import record_result
from advisor.study.storage import stores as st

NAME = "digits_cnn-cpu"
HARDWARE = {"cpu_model": "AMD EPYC", "cpu_cores": 2, "cpu_flags": ["avx2", "avx512_bf16", "avx512f"], "gpus": [],
            "driver_version": None, "torch_version": "2.13.0+cpu", "torchao_version": "0.18.0",
            "cuda_version": None, "python_version": "3.11.7", "platform": "linux-x86_64"}
MiB = 2**20

# (config changes, throughput, peak MiB, accuracy) or (config changes, failure class, message)
TRIALS: list[tuple[dict[str, Any], Any, Any, Any]] = [
    ({}, 6736.0, 98.6, 0.9667),                                                  # 0 baseline
    ({"precision": "bf16"}, 10240.0, 100.2, 0.9639),                             # 1 front: fast
    ({"batch_size": 256, "channels_last": True}, 11873.0, 131.0, 0.9611),        # 2 front: fastest
    ({"compile": True}, 10911.0, 192.5, 0.9750),                                 # 3 front: most accurate
    ({"batch_size": 32, "threads": 1}, 4120.0, 95.1, 0.9694),                    # 4 front: smallest
    ({"batch_size": 512}, 12500.0, 160.0, 0.8222),                               # 5 infeasible (accuracy)
    ({"parallelism": "ddp", "devices": 2, "comm_hook": "fp16"}, 5219.0, 103.4, 0.9444),  # 6 infeasible
    ({"batch_size": 128, "pruning": "l1_unstructured"}, 7011.0, 101.9, 0.9667),  # 7 dominated
    ({"batch_size": 1024}, "oom", "CUDA out of memory. Tried to allocate 2.00 GiB", None),       # 8
    ({"quantization": "qat_int8", "precision": "bf16"}, "error",
     "RuntimeError: mat1 and mat2 must have the same dtype\n  File \"model.py\", line 12", None),  # 9
    ({"activation_checkpointing": True, "grad_accumulation": 2}, 6020.0, 97.0, 0.9694),  # 10 front
]


CORE_KEYS = ("batch_size", "precision", "channels_last", "compile")  # a config as the first version stored it


def write_recorded_study(url: str, name: str = NAME, max_accuracy_drop: float = 0.01,
                         trials: list[tuple[dict[str, Any], Any, Any, Any]] | None = None,
                         old_format: bool = False, telemetry: dict[int, dict[str, Any]] | None = None
                         ) -> optuna.Study:
    """Write the study into storage ``url`` and return it. ``old_format`` stores configs
    with only the knobs the first version had (as studies written back then look);
    ``telemetry`` adds to the telemetry of the trials it names by number."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = st.open_storage(url)
    study = optuna.create_study(storage=storage, study_name=name, directions=list(DIRECTIONS))
    for key, value in {"workload_path": "/home/me/examples/digits_cnn.py", "workload_sha256": "0" * 64,
                       "workload": "train", "space_name": "cpu", "settings": {"train_samples": 7185, "seed": 0,
                                                                            "device": "cpu", "workload": "train"},
                       "hardware": HARDWARE, "max_accuracy_drop": max_accuracy_drop, "memory_cap_bytes": None,
                       "objectives": list(OBJECTIVES)}.items():
        study.set_user_attr(key, value)
    base_accuracy = None
    for number, (changes, a, b, c) in enumerate(TRIALS if trials is None else trials):
        config = TrialConfig().replace(**changes)
        trial = study.ask()
        stored = config.to_dict()
        trial.set_user_attr("config", {k: stored[k] for k in CORE_KEYS} if old_format else stored)
        trial.set_user_attr("config_key", config.key())
        if number == 0:
            trial.set_user_attr("baseline", True)
        if isinstance(a, str):
            result = TrialResult.failed(a, b, phase_s={"build": 0.4})
        else:
            step = config.batch_size / a
            result = TrialResult(ok=True, throughput=a, peak_memory_bytes=int(b * MiB), score=c,
                                 step_time_median_s=step, step_time_iqr_s=step * 0.02, timed_steps=40,
                                 timing_converged=True, first_step_s=0.05, train_samples=7185, final_loss=0.12,
                                 phase_s={"build": 0.4, "train": 3.1, "evaluate": 0.2, "time": 1.5},
                                 telemetry={"cpu_peak_rss_bytes": int(b * MiB), "threads": 2,
                                            **(telemetry or {}).get(number, {})},
                                 host="node-a", pid=1000 + number)
            if base_accuracy is None:
                base_accuracy = c
        record_result(study, trial, result, 5.0 + number / 10, Limits(max_accuracy_drop), base_accuracy)
    return study


def add_probed_trial(study: optuna.Study, reason: str = "dominated by trial 1 (3.41x its throughput, 0.83x its memory)"
                     ) -> optuna.trial.FrozenTrial:
    """A probed-only trial as two-stage evaluation stores one: PRUNED, with its probe's
    figures and why no training run was needed (3,000 samples/s, 120 MiB; made up, named as such)."""
    trial = study.ask()
    config = TrialConfig(batch_size=16, threads=1)
    for key, value in {"config": config.to_dict(), "config_key": config.key(), "throughput": 3000.0,
                       "peak_memory_bytes": 120 * MiB, "probe_done": True, "accuracy_skipped": reason}.items():
        trial.set_user_attr(key, value)
    return study.tell(trial, state=optuna.trial.TrialState.PRUNED)
