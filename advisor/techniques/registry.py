"""Every technique, by knob name, in the order ``apply`` runs them."""

from __future__ import annotations

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

_ALL: list[Technique] = [
    Precision(), Threads(), ChannelsLast(), Compile(), CompileMode(),
    Parallelism(), Devices(), CommHook(), BucketMb(), Pruning(), PruneAmount(), Quantization(),
    ActivationCheckpointing(), GradAccumulation(), NumWorkers(), PinMemory(), FusedOptimizer(),
    DdpStaticGraph(), DdpBucketView(), SyncBatchnorm(), FsdpMixedPrecision(), FsdpReshard(),
    CudnnBenchmark(), ExpandableSegments(), SdpaBackend(), Fp8Scaling(), CompileOptimizer(),
    TpSize(), PpSchedule(), PpMicrobatches(), PpBalance(),
]
TECHNIQUES: dict[str, Technique] = {t.key: t for t in sorted(_ALL, key=lambda t: t.order)}
