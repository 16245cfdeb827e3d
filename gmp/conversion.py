"""Conversion of a trained network's ReLU layers into GmP units computing the same function
(Chen & Ge, Eq. (5)).

:func:`convert` applies two rules to the modules of every ``nn.Sequential``: ``nn.Linear ->
nn.ReLU`` becomes a :class:`gmp.GmPLinear` (:mod:`gmp.layers`), and ``nn.Conv2d [->
nn.BatchNorm2d] -> nn.ReLU`` a :class:`gmp.GmPConv2d` (:func:`gmp.conv.convert_conv_block`). It
lives apart from both so that each of those modules needs only what it builds on
(:mod:`gmp.conv` imports :mod:`gmp.layers`, never the reverse).
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from gmp.conv import convert_conv_block
from gmp.layers import GmPLinear, check_exact

__all__ = ["convert"]


def _converted(linear: nn.Linear, mean_norm: bool) -> GmPLinear:
    w = linear.weight.detach()
    layer = GmPLinear(linear.in_features, linear.out_features, activation="relu", init="glorot",
                      mean_norm=mean_norm, device=w.device, dtype=w.dtype)
    layer.set_weight(w, None if linear.bias is None else linear.bias.detach())
    return layer


def _linear_block(modules: list[nn.Module], mean_norm: bool) -> tuple[nn.Module, int] | None:
    """The rule of :func:`convert` for ``nn.Linear -> nn.ReLU``: ``(unit, modules replaced)`` or None."""
    if len(modules) > 1 and isinstance(modules[0], nn.Linear) and isinstance(modules[1], nn.ReLU):
        check_exact(modules[:2], (nn.Linear, nn.ReLU))
        return _converted(modules[0], mean_norm), 2
    return None


def convert(module: nn.Module, mean_norm: bool = False) -> nn.Module:
    """A copy of ``module`` with every ReLU layer under geometric parameterization.

    Every ``nn.Linear`` immediately followed by an ``nn.ReLU`` in the same
    ``nn.Sequential`` (at any depth of nesting) becomes a :class:`GmPLinear` that
    includes the ReLU, with ``r = ||w||``, ``lam = b / ||w||``, ``theta`` from
    ``w / ||w||`` (Eq. (5) of Chen & Ge); likewise every ``nn.Conv2d`` followed by an
    ``nn.ReLU``, or by an ``nn.BatchNorm2d`` and an ``nn.ReLU``, becomes a
    :class:`gmp.GmPConv2d` (the batch normalization folded in with its running statistics,
    :func:`gmp.conv.convert_conv_block`). The modules a unit absorbs are replaced by
    ``nn.Identity`` so that indices into the Sequential keep their meaning. The converted
    network computes the same function at conversion time (in evaluation mode when it
    holds batch normalization). A layer not followed by a ReLU (the output layer) stays
    standard (Sec. 3.1).

    Only what can be converted exactly is converted, and the rest is refused, never
    approximated: a block whose module subclasses ``nn.Linear`` / ``nn.Conv2d`` /
    ``nn.BatchNorm2d`` / ``nn.ReLU`` with its own ``forward``, or carries hooks, raises
    ValueError (``check_exact``). A module used twice (tied weights) becomes
    one unit used twice; if it is also used where it is not converted (once before a ReLU,
    once not), the tie cannot be kept and ValueError is raised. So is a parameter (or buffer)
    shared between two modules (``b.weight = a.weight``) of which one is converted: a unit
    holds its own ``theta``, ``lam`` and ``r``, so the tie would be dropped.

    With ``mean_norm=True`` every converted layer except the first one (in module order)
    gets a :class:`MeanNorm` on its input (Eq. (11): intermediate layers). Its running
    mean starts at zero, so the function is preserved in evaluation mode at conversion.
    The original module is not modified.
    """
    if not isinstance(module, nn.Module):
        raise ValueError(f"convert expects a torch.nn.Module, got {type(module).__name__}")
    result = copy.deepcopy(module)  # keeps ties: a module used twice is copied once
    rules = (_linear_block, convert_conv_block)
    units: dict[int, tuple[nn.Module, nn.Module]] = {}  # id(original) -> (original, its unit)
    absorbed: dict[int, tuple[int, str, torch.Tensor]] = {}  # id(a tensor a unit absorbed) -> (id(its unit's
    # original), its name, the tensor: held so that its id is not reused once its module leaves the copy)

    def visit(parent: nn.Module, prefix: str) -> None:
        if isinstance(parent, nn.Sequential):
            names = list(parent._modules)
            for i, this in enumerate(names):
                following = [parent._modules[name] for name in names[i:]]
                for rule in rules:
                    found = rule(following, mean_norm and len(units) > 0)
                    if found is not None:
                        unit, length = found
                        original = following[0]
                        unit = units.setdefault(id(original), (original, unit))[1]
                        for name, module in zip(names[i:i + length], following):
                            _absorb(absorbed, module, id(original), prefix + name)
                        parent._modules[this] = unit
                        for name in names[i + 1:i + length]:
                            parent._modules[name] = nn.Identity()
                        break
        for name, child in parent.named_children():
            if not isinstance(child, GmPLinear):
                visit(child, f"{prefix}{name}.")

    visit(result, "")
    left = {id(m) for _, m in result.named_modules(remove_duplicate=False)} & set(units)
    if left:
        names = [name for name, m in result.named_modules(remove_duplicate=False) if id(m) in left]
        raise ValueError(f"convert cannot keep a weight tie: the module at {', '.join(names)} is also "
                         "used before a ReLU, where it would become a GmP unit; untie it first")
    for name, tensor in [*result.named_parameters(remove_duplicate=False),
                         *result.named_buffers(remove_duplicate=False)]:
        if id(tensor) in absorbed:  # a tensor a unit absorbed is still used by a layer that stays
            raise ValueError(f"convert cannot keep a weight tie: the parameter {absorbed[id(tensor)][1]} is "
                             f"shared with {name}, which is not converted with it; untie it first")
    return result


def _absorb(absorbed: dict[int, tuple[int, str, torch.Tensor]], module: nn.Module, owner: int, name: str) -> None:
    """Record the parameters and buffers of ``module`` that the unit of ``owner`` folds into its own;
    ValueError if another unit folded in the same tensor (a tie that two units would drop)."""
    for tensor_name, tensor in [*module.named_parameters(), *module.named_buffers()]:
        full = f"{name}.{tensor_name}"
        other = absorbed.setdefault(id(tensor), (owner, full, tensor))
        if other[0] != owner:
            raise ValueError(f"convert cannot keep a weight tie: the parameter {other[1]} is shared with {full}, "
                             f"and the two layers would become separate GmP units with their own copies; "
                             f"untie them first")
