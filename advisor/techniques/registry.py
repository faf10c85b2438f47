"""Every technique, by knob name, in the one order ``apply`` runs them.

``APPLY_ORDER`` is that order, read top to bottom in one place (as torchtitan applies
its parallelisms, checkpointing and compile in one function). A knob without an ``apply`` of
its own (a *companion*: ``prune_amount``, ``devices``, ``compile_mode``, ...) sits beside
the knob whose ``apply`` reads it. A new knob: its ``TrialConfig`` field (one line of
``advisor/core/config.py``, with its domain), its module here, and its place below;
``tests/techniques/test_registry.py`` fails while the three disagree.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from advisor.techniques._base import Technique
from advisor.techniques.attention import SdpaBackend
from advisor.techniques.channels_last import ChannelsLast
from advisor.techniques.compile import Compile, CompileMode
from advisor.techniques.cuda_levers import CudnnBenchmark, ExpandableSegments
from advisor.techniques.data import NumWorkers, PinMemory
from advisor.techniques.memory import ActivationCheckpointing, GradAccumulation
from advisor.techniques.optimizer import CompileOptimizer, FusedOptimizer
from advisor.techniques.parallel_options import (
    DdpBucketView,
    DdpStaticGraph,
    FsdpMixedPrecision,
    FsdpReshard,
    PpBalance,
    PpMicrobatches,
    PpSchedule,
    SyncBatchnorm,
    TpSize,
)
from advisor.techniques.parallelism import BucketMb, CommHook, Devices, Parallelism
from advisor.techniques.precision import Precision
from advisor.techniques.pruning import PruneAmount, Pruning
from advisor.techniques.quantization import Fp8Scaling, Quantization
from advisor.techniques.threads import Threads

APPLY_ORDER: tuple[Technique, ...] = (
    # 1. the process's settings, before any of the model's kernels runs (apply has moved the model to its device)
    Threads(), ExpandableSegments(), CudnnBenchmark(), SdpaBackend(),
    # 2. the arithmetic and layout of the parameters
    Precision(), ChannelsLast(),
    # 3. what the weights become: pruning's masks are carried over by quantization
    Pruning(), PruneAmount(), Fp8Scaling(), Quantization(),
    # 4. the step's memory: checkpointing wraps the (quantized) blocks, before any wrapper
    ActivationCheckpointing(), GradAccumulation(),
    # 5. the data the step is fed
    NumWorkers(), PinMemory(),
    # 6. the distributed wrapper: Parallelism.apply reads every companion of this group
    TpSize(), PpSchedule(), PpMicrobatches(), PpBalance(), SyncBatchnorm(), Devices(), Parallelism(),
    CommHook(), BucketMb(), DdpStaticGraph(), DdpBucketView(), FsdpMixedPrecision(), FsdpReshard(),
    # 7. the optimizer, set up at the first step, after every knob above changed the parameters
    CompileOptimizer(), FusedOptimizer(),
    # 8. compile last: it traces the model as every knob above left it
    CompileMode(), Compile(),
)
TECHNIQUES: dict[str, Technique] = {t.key: t for t in APPLY_ORDER}


def preloads(values: Iterable[tuple[str, Any]]) -> tuple[str, ...]:
    """What trials of these ``(knob, value)`` pairs import lazily (``Technique.preload``),
    each once, in the order the pairs come."""
    return tuple(dict.fromkeys(m for key, value in values if key in TECHNIQUES
                               for m in TECHNIQUES[key].preload(value)))
