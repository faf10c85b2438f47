"""Quantization through torchao's ``quantize_`` configs.

Training workload: ``qat_int8`` (fake-quantized int8 activations and weights while
training, converted to real int8 before evaluation) and ``fp8_training`` (torchao
float8 training, CUDA compute capability >= 8.9). Inference workload: ``int8_dynamic``,
``int8_weight_only``, and on CUDA ``int4_weight_only`` and ``fp8`` (dynamic float8).
torchao acts on ``nn.Linear`` layers; transformers' Conv1D layers (GPT-2) are made equal
nn.Linear ones first by ``advisor.apply`` (advisor/techniques/conv1d.py). Quantized models
live only inside the trial's process (they cannot be pickled); the trial returns numbers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from advisor.core.errors import UnsupportedError
from advisor.techniques._base import Technique, plain_tensor
from advisor.techniques.conv1d import swap_snippet
from advisor.workload.structure import own_weight

if TYPE_CHECKING:
    from advisor.machine.hardware import Hardware
    from advisor.techniques.prepared import Prepared

ADA = (8, 9)
AMPERE = (8, 0)
INT4_GROUP = 128


class Quantization(Technique):
    key = "quantization"
    description = "torchao quantization: QAT int8 / fp8 training; int8, int4, fp8 inference"
    train_only = ("qat_int8", "fp8_training")
    inference_only = ("int8_dynamic", "int8_weight_only", "int4_weight_only", "fp8")

    def unavailable(self, value: Any, hw: Hardware) -> str | None:
        if value == "none":
            return None
        if not hw.torchao:
            return "needs torchao, which is not installed (pip install torchao)"
        if value in ("fp8_training", "fp8"):
            cap = hw.min_capability()
            if hw.device != "cuda":
                return "fp8 matmuls need an NVIDIA GPU with compute capability >= 8.9 (Ada, Hopper); this machine has no CUDA GPU"
            if cap is not None and cap < ADA:
                return f"fp8 needs compute capability >= 8.9 (Ada, Hopper); this machine has {hw.gpu_names()}"
        if value == "int4_weight_only":
            cap = hw.min_capability()
            if hw.device != "cuda":
                return "torchao's int4 weight-only kernel (tinygemm) is a CUDA kernel; this machine has no CUDA GPU"
            if cap is not None and cap < AMPERE:
                return f"int4 weight-only needs compute capability >= 8.0; this machine has {hw.gpu_names()}"
        return None

    def preload(self, value: Any) -> tuple[str, ...]:
        return ("torchao:quantization",) if value != "none" else ()

    def pointless(self, value: Any, facts: dict[str, Any]) -> str | None:
        if value != "none" and facts.get("linear_layers") == 0:
            return "torchao quantizes nn.Linear layers (and transformers Conv1D, made nn.Linear) and the model has none"
        if value != "none" and facts.get("linear_layers") and facts.get("own_weight_linear_layers") == 0:
            left_out = facts.get("parametrized_layers") or []
            return (f"its Linear layers{' ' + ', '.join(left_out[:4]) if left_out else ''}"
                    f"{' ...' if len(left_out) > 4 else ''} have parametrized weights (weight_norm, spectral_norm or "
                    "another parametrization), which torchao cannot swap or quantize")
        return None

    def apply(self, value: Any, prepared: Prepared) -> None:
        if value == "none":
            return
        import torch

        if not any(isinstance(m, torch.nn.Linear) for m in prepared.module.modules()):  # (Conv1D swapped by apply)
            raise UnsupportedError(f"quantization {value}: torchao quantizes nn.Linear layers (and transformers "
                                   "Conv1D, made nn.Linear) and this model has none")
        try:
            import torchao.quantization as tq
        except ImportError:
            raise UnsupportedError("quantization needs torchao, which is not installed (pip install torchao)") from None
        except Exception as exc:  # a torchao built for another torch fails in its own ways
            raise UnsupportedError(f"torchao cannot be imported with this torch ({type(exc).__name__}: {exc})") from None
        module = prepared.module
        if value == "qat_int8":
            _qat_prepare(module)
            prepared.step.finishers.append(lambda: _qat_convert(module))
        elif value == "fp8_training":
            from torchao.float8 import convert_to_float8_training

            convert_to_float8_training(module, module_filter_fn=_fp8_friendly, config=float8_config(prepared))
            prepared.numerics.eval_with_no_grad = True
            if prepared.config.fp8_scaling == "rowwise":
                _contiguous_inputs(module)
        else:
            config = {
                "int8_dynamic": lambda: tq.Int8DynamicActivationInt8WeightConfig(),
                "int8_weight_only": lambda: tq.Int8WeightOnlyConfig(),
                "int4_weight_only": lambda: tq.Int4WeightOnlyConfig(group_size=INT4_GROUP,
                                                                   int4_packing_format=_tinygemm_format()),
                "fp8": lambda: fp8_inference_config(prepared.config),
            }[value]()
            tq.quantize_(module, config, filter_fn=_quantizable(value, prepared.config.fp8_scaling))

    def snippet(self, value: Any) -> str | None:
        text = self._snippet(value)
        return f"{swap_snippet('torchao takes nn.Linear only')}\n{text}" if text else None

    def _snippet(self, value: Any) -> str | None:
        imports = "from torchao.quantization import quantize_"
        if value == "qat_int8":
            return (f"{imports}, Int8DynamicActivationInt8WeightConfig\n"
                    "from torchao.quantization.qat import QATConfig, IntxFakeQuantizeConfig\n"
                    "act = IntxFakeQuantizeConfig(torch.int8, 'per_token', is_symmetric=False)\n"
                    "weight = IntxFakeQuantizeConfig(torch.int8, 'per_channel', is_symmetric=True)\n"
                    "quantize_(model, QATConfig(activation_config=act, weight_config=weight, step='prepare'))\n"
                    "# ... train ...\n"
                    "quantize_(model, QATConfig(step='convert'))\n"
                    "quantize_(model, Int8DynamicActivationInt8WeightConfig())")
        if value == "fp8_training":
            return ("from torchao.float8 import Float8LinearConfig, convert_to_float8_training\n"
                    "# pad_inner_dim: the weight gradient's inner dimension is the rows of a per-rank batch\n"
                    "config = Float8LinearConfig(pad_inner_dim=True)  # under FSDP2 also enable_fsdp_float8_all_gather=True\n"
                    "convert_to_float8_training(model, config=config)  # before FSDP and torch.compile")
        names = {"int8_dynamic": "Int8DynamicActivationInt8WeightConfig()", "int8_weight_only": "Int8WeightOnlyConfig()",
                 "int4_weight_only": f"Int4WeightOnlyConfig(group_size={INT4_GROUP})",
                 "fp8": "Float8DynamicActivationFloat8WeightConfig()"}
        if value == "fp8":
            return (f"{imports}, {names[value].split('(')[0]}\n"
                    "# the layers torchao 0.18's fp8 kernels take (advisor's filter): sizes divisible by 16,\n"
                    "# and under one scale per tensor no 128x128 weight (read as 128x128 blocks, then refused)\n"
                    "quantize_(model, Float8DynamicActivationFloat8WeightConfig(),\n"
                    "          filter_fn=lambda m, fqn: isinstance(m, torch.nn.Linear) and m.in_features % 16 == 0\n"
                    "          and m.out_features % 16 == 0 and (m.in_features, m.out_features) != (128, 128))")
        if value in names:
            return f"{imports}, {names[value].split('(')[0]}\nquantize_(model, {names[value]})"
        return None


def _tinygemm_format() -> Any:
    """The int4 layout of the tinygemm CUDA kernel (torchao's default needs fbgemm-gpu-genai)."""
    try:
        from torchao.quantization.quantize_.workflows.int4.int4_packing_format import Int4PackingFormat

        return Int4PackingFormat.TILE_PACKED_TO_4D
    except ImportError:
        return "tile_packed_to_4d"


def quantized_layers(module: Any) -> int:
    """Linear layers whose weight is a torchao quantized tensor (counted after finish());
    fp8-training layers count too, 2:4 sparse weights do not."""
    import torch

    count = 0
    for m in module.modules():
        if not isinstance(m, torch.nn.Linear):
            continue
        w = getattr(m, "weight", None)
        if type(m).__name__ == "Float8Linear" or (
                w is not None and not plain_tensor(w) and "Sparse" not in type(w).__name__):
            count += 1
    return count


def _quantizable(value: str, fp8_scaling: str = "tensorwise") -> Any:
    """torchao's kernels need some divisibility of the Linear's input size; skip the rest.
    fp8 with one scale per tensor also skips a 128x128 weight: torchao 0.18 reads its scale's
    block (the whole weight, 128x128) as 128x128 block scaling, and its matmul then refuses
    the per-tensor input (``AssertionError: input_tensor must be 1x128 scaled``, on an H200,
    issue 27): the layer stays in the precision it has. So does a Linear whose weight a
    parametrization computes (``_swappable``)."""
    def ok(module: Any, fqn: str) -> bool:
        if not _swappable(module) or not plain_tensor(module.weight):
            return False
        if value == "int4_weight_only":
            return module.in_features % INT4_GROUP == 0
        if value == "fp8":
            square_128 = fp8_scaling == "tensorwise" and (module.in_features, module.out_features) == (128, 128)
            return module.in_features % 16 == 0 and module.out_features % 16 == 0 and not square_128
        return True

    return ok


def float8_config(prepared: Prepared) -> Any:
    """torchao's fp8 training config: its recipe for ``fp8_scaling`` (tensorwise: one scale
    per tensor; rowwise: one per row, more accurate, slower), with the matmul's inner
    dimension padded to a multiple of 16: in the weight gradient that is the number of rows
    of a per-rank micro-batch (tokens x samples), which the knobs can make anything (batch 32
    over 4 ranks: 8 rows; torch's fp8 matmul refuses it unpadded). Under FSDP2 with
    tensorwise scaling the weights are all-gathered in fp8 (half the traffic of bf16;
    torchao supports it for tensorwise only)."""
    import dataclasses

    from torchao.float8 import Float8LinearConfig

    cfg = prepared.config
    recipe = Float8LinearConfig.from_recipe_name(cfg.fp8_scaling)
    return dataclasses.replace(recipe, pad_inner_dim=True, enable_fsdp_float8_all_gather=(
        cfg.parallelism == "fsdp" and cfg.fp8_scaling == "tensorwise"))


def fp8_inference_config(config: Any) -> Any:
    """torchao's fp8 inference config: dynamic fp8 activations and fp8 weights, scaled per
    tensor or per row (``fp8_scaling``)."""
    import torchao.quantization as tq

    return tq.Float8DynamicActivationFloat8WeightConfig(
        granularity=tq.PerRow() if config.fp8_scaling == "rowwise" else tq.PerTensor())


class Fp8Scaling(Technique):
    key = "fp8_scaling"
    read_by = "quantization"
    description = ("fp8 scales: one per tensor (tensorwise, fastest) or one per row (rowwise, more accurate); "
                   "torchao's fp8 training recipe and fp8 inference granularity")

    def unavailable(self, value: Any, hw: Hardware) -> str | None:
        if value == "tensorwise":
            return None
        return Quantization().unavailable("fp8", hw)  # fp8 at all

    def snippet(self, value: Any) -> str | None:
        if value == "tensorwise":
            return None
        return ("config = Float8LinearConfig.from_recipe_name('rowwise')  # fp8 training (then pad_inner_dim=True)\n"
                "# rowwise training: each Float8Linear takes a contiguous input (no copy of rowwise fp8 in torchao)\n"
                "# layer.register_forward_pre_hook(lambda m, args: (args[0].contiguous(), *args[1:]))\n"
                "Float8DynamicActivationFloat8WeightConfig(granularity=PerRow())  # fp8 inference")


def _contiguous_inputs(module: Any) -> None:
    """Give each Float8Linear a contiguous input. torchao 0.18's Float8Linear flattens its
    input after the cast to fp8 (``reshape(-1, in_features)``); an input of more than two
    dimensions that is not contiguous (``x.transpose(1, 2)``, as attention over the pixels
    or the tokens feeds it) then needs a copy of the fp8 tensor, and with rowwise scales
    torchao has none (``AssertionError: aten.clone.default with axiswise scaling is not
    supported yet``), in eager mode and under torch.compile alike. The copy is made before
    the cast instead; a contiguous input is passed as it is."""
    def contiguous(layer: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        return (args[0].contiguous(), *args[1:])

    for m in module.modules():
        if type(m).__name__ == "Float8Linear":
            m.register_forward_pre_hook(contiguous)


def _fp8_friendly(module: Any, fqn: str) -> bool:
    return _swappable(module) and module.in_features % 16 == 0 and module.out_features % 16 == 0


def _swappable(module: Any) -> bool:
    """An nn.Linear whose weight is its own parameter: a weight_norm'd or spectral_norm'd
    layer computes its weight, and torchao's swaps then fail ("cannot assign
    'torch.FloatTensor' as parameter 'weight'"): such a layer keeps its precision."""
    import torch

    return isinstance(module, torch.nn.Linear) and own_weight(module)


def _fake_quant_configs() -> tuple[Any, Any]:
    import torch
    from torchao.quantization.qat import IntxFakeQuantizeConfig

    # Per-channel symmetric int8 weights as Int8DynamicActivationInt8WeightConfig (applied
    # after training) stores them; per-token int8 activations, asymmetric: torchao's fake
    # quantizer has no symmetric per-token mode (torchao 0.18).
    act = IntxFakeQuantizeConfig(torch.int8, "per_token", is_symmetric=False)
    weight = IntxFakeQuantizeConfig(torch.int8, "per_channel", is_symmetric=True)
    return act, weight


def _qat_prepare(module: Any) -> None:
    """Swap Linear layers for fake-quantized ones; pruning masks are re-attached after the swap."""
    import torch.nn.utils.prune as prune
    from torchao.quantization import quantize_
    from torchao.quantization.qat import QATConfig

    from advisor.techniques.pruning import make_permanent, masks

    carried = masks(module)
    make_permanent(module)
    act, weight = _fake_quant_configs()
    quantize_(module, QATConfig(activation_config=act, weight_config=weight, step="prepare"),
              filter_fn=lambda m, fqn: _swappable(m))
    layers = dict(module.named_modules())
    for name, mask in carried.items():
        prune.custom_from_mask(layers[name], "weight", mask=mask)


def _qat_convert(module: Any) -> None:
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_
    from torchao.quantization.qat import QATConfig

    quantize_(module, QATConfig(step="convert"))
    quantize_(module, Int8DynamicActivationInt8WeightConfig(), filter_fn=lambda m, fqn: _swappable(m))
