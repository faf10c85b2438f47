"""The Optuna samplers a study can use (``--sampler``)."""

from __future__ import annotations

import importlib.util
import warnings
from typing import TYPE_CHECKING

from advisor.core.errors import StudyError

if TYPE_CHECKING:
    import optuna

SAMPLERS = ("default", "tpe", "nsga2", "random", "gp")
# what a sampler needs beyond advisor's own dependencies: Optuna's GPSampler fits its
# Gaussian process with torch (a dependency) and scipy (not one: only `gp` needs it).
# TPE, NSGA-II and random search need numpy only.
NEEDS = {"gp": ("scipy",)}


def check_sampler(name: str, what: str = "--sampler") -> str:
    """``name`` if it is a known sampler whose packages are installed; a StudyError
    otherwise, naming ``what`` (the flag or keyword), with the install command (before
    storage is touched)."""
    if name not in SAMPLERS:
        raise StudyError(f"{what} {name!r} is unknown (expected {', '.join(SAMPLERS)})")
    missing = [m for m in NEEDS.get(name, ()) if importlib.util.find_spec(m) is None]
    if missing:
        raise StudyError(f"{what} {name} needs {' and '.join(missing)}, which is not installed (Optuna's GPSampler "
                         f"fits its Gaussian process with it): pip install 'advisor[gp]' (or pip install "
                         f"{' '.join(missing)}), or choose another sampler ({', '.join(s for s in SAMPLERS if s not in NEEDS)})")
    return name


def make_sampler(name: str, seed: int) -> optuna.samplers.BaseSampler:
    """The sampler for a study.

    TPE is the default: the space is small and categorical and a study has tens of
    trials, where TPE's multi-objective mode is sample-efficient, handles conditional
    (define-by-run) knobs natively, and with ``constant_liar`` spreads trials that run in
    parallel. NSGA-II needs populations of ~50 per generation to work; random search is the
    honest reference. ``constraints`` set with trial.set_constraint are honoured by each.
    "default" is TPE after the strategy's seeds and combinations (advisor.search.strategy).
    """
    import optuna

    check_sampler(name)
    if name in ("default", "tpe"):
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # group=True
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=8, multivariate=True,
                                          group=True, constant_liar=True)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=16)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    # the knobs a condition leaves out of a trial (pp_schedule without pp) are sampled apart: expected
    return optuna.samplers.GPSampler(seed=seed, n_startup_trials=8, warn_independent_sampling=False)
