"""Pairs of Linear layers that tensor parallelism can split column-wise then row-wise,
read off a module's ``torch.fx`` graph: the first layers' outputs reach the second layer
through elementwise operations only (activations, dropout, a product of two such outputs
as in SwiGLU, arithmetic with plain numbers), and are used nowhere else. Those operations
act on each rank's slice of columns alone, so the row-wise layer's partial sums, added
over the ranks, give the unsplit result.
"""

from __future__ import annotations

import functools
import operator
from typing import Any

_UNARY_METHODS = {"relu", "sigmoid", "tanh", "exp", "square", "neg"}
_BINARY_METHODS = {"mul", "add", "sub", "div", "pow", "__mul__", "__add__"}


def mlp_pairs(module: Any, skipped: list[str], where: str) -> list[tuple[tuple[str, ...], str]]:
    """``[((first, ...), second), ...]``: names of ``module``'s direct Linear children, the
    firsts to split column-wise, the second row-wise. A module with two or more Linear
    children that fx cannot trace adds a reason to ``skipped``."""
    from torch import nn

    linear = {n for n, c in module.named_children() if isinstance(c, nn.Linear)}
    if len(linear) < 2:
        return []
    try:
        graph = _trace(module)
    except Exception as exc:  # noqa: BLE001 -- control flow on values, unsupported ops: not plannable
        skipped.append(f"{where or 'the model'}: its forward cannot be traced by torch.fx "
                       f"({type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''})")
        return []
    calls: dict[str, list[Any]] = {}
    for node in graph.nodes:
        if node.op == "call_module" and node.target in linear:
            calls.setdefault(node.target, []).append(node)
    once = {name: nodes[0] for name, nodes in calls.items() if len(nodes) == 1}
    by_node = {node: name for name, node in once.items()}
    pairs = []
    for second, node in once.items():
        firsts = _sources(node.args[0], by_node, module) if len(node.args) == 1 else None
        if not firsts or not all(_only_feeds(first, node, module) for first in firsts):
            continue
        width = module.get_submodule(second).in_features
        names = tuple(by_node[f] for f in firsts)
        if any(module.get_submodule(n).out_features != width for n in names):
            continue
        pairs.append((tuple(sorted(names)), second))
    if not pairs:
        skipped.append(f"{where or 'the model'}: no pair among its Linear layers {', '.join(sorted(linear))} "
                       f"has only elementwise operations between them (and no other use of the first's output)")
    return pairs


def _trace(module: Any) -> Any:
    import torch.fx

    class Leaves(torch.fx.Tracer):  # every child is one call: only this module's own ops show
        def is_leaf_module(self, m: Any, qualname: str) -> bool:
            return True

    return Leaves().trace(module)


def _sources(value: Any, linears: dict[Any, str], module: Any) -> set[Any] | None:
    """The Linear nodes ``value`` is computed from through elementwise operations only, or
    None when anything else (an input, a reduction, a reshape) feeds it."""
    import torch.fx

    if not isinstance(value, torch.fx.Node):
        return None
    if value in linears:
        return {value}
    operands = _elementwise_operands(value, module)
    if operands is None:
        return None
    found: set[Any] = set()
    for operand in operands:
        if not isinstance(operand, torch.fx.Node):
            continue  # a plain number
        sub = _sources(operand, linears, module)
        if sub is None:
            return None
        found |= sub
    return found or None


def _only_feeds(node: Any, target: Any, module: Any) -> bool:
    """Every use of ``node`` leads, through elementwise operations, to ``target`` alone."""
    for user in node.users:
        if user is target:
            continue
        if _elementwise_operands(user, module) is None or not _only_feeds(user, target, module):
            return False
    return True


def _elementwise_operands(node: Any, module: Any) -> list[Any] | None:
    """The tensor operands of ``node`` when it is elementwise, else None."""
    if node.op == "call_module":
        return list(node.args[:1]) if _elementwise_module(module.get_submodule(node.target)) else None
    if node.op == "call_function" and node.target in _functions():
        return [a for a in node.args if not isinstance(a, (int, float, bool, str, type(None)))]
    if node.op == "call_method":
        if node.target in _UNARY_METHODS and len(node.args) == 1:
            return list(node.args)
        if node.target in _BINARY_METHODS and len(node.args) == 2:
            return list(node.args)
    return None


def _elementwise_module(sub: Any) -> bool:
    from torch import nn

    kinds = (nn.ReLU, nn.ReLU6, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid, nn.LeakyReLU, nn.ELU, nn.Mish,
             nn.Hardswish, nn.Hardsigmoid, nn.Softplus, nn.Dropout, nn.Identity)
    return isinstance(sub, kinds) or type(sub).__module__ == "transformers.activations"


@functools.cache
def _functions() -> frozenset[Any]:
    import torch
    import torch.nn.functional as F

    return frozenset({F.relu, F.relu6, F.gelu, F.silu, F.mish, F.elu, F.leaky_relu, F.hardswish, F.softplus,
                      F.dropout, F.sigmoid, F.tanh, torch.relu, torch.sigmoid, torch.tanh, torch.exp, torch.mul,
                      torch.add, torch.sub, torch.div, torch.square, operator.mul, operator.add, operator.sub,
                      operator.truediv, operator.pow, operator.neg})
