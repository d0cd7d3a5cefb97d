"""Effects: what a jaxpr does besides computing its outputs.

A pure jaxpr may be reordered, deduplicated or dropped when its outputs go
unused. An equation with an *effect* (printing, a host callback, a write to a
`Ref`) may not. The effects are part of a jaxpr's type: `jaxpr.effects` is the
union of its equations' effects, and a primitive declares its own with a rule
in `effect_rules`, next to its abstract evaluation. A higher-order primitive
(jit, cond, scan, ...) has the effects of the jaxprs it holds, so effects
propagate outward through every one of them without a rule of their own.
"""
from __future__ import annotations

from typing import Callable


class Effect:
  """One kind of effect. Effects are compared by value."""

  def __eq__(self, other):
    return type(self) is type(other) and vars(self) == vars(other)

  def __hash__(self):
    return hash((type(self), tuple(sorted(vars(self).items()))))

  def __repr__(self):
    fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
    return f"{type(self).__name__}({fields})"


class OrderedEffect(Effect):
  """An effect whose occurrences must happen in program order, across calls
  too: lowering threads a token through them."""


class DebugEffect(Effect):
  """`debug.print` and `debug.callback`: run when the program runs, in any order."""


class OrderedDebugEffect(OrderedEffect):
  """`debug.print(..., ordered=True)`."""


class IOEffect(Effect):
  """`io_callback`: the callback may touch the outside world."""


class OrderedIOEffect(OrderedEffect):
  """`io_callback(..., ordered=True)`."""


class RefEffect(Effect):
  """A read, write or accumulation of the `Ref` that is input `input_index`
  (of the equation, or of the jaxpr, once propagated)."""

  def __init__(self, input_index: int):
    self.input_index = input_index


class ReadEffect(RefEffect):
  pass


class WriteEffect(RefEffect):
  pass


class AccumEffect(RefEffect):
  pass


class InternalMutableArrayEffect(Effect):
  """A `Ref` created inside the jaxpr (`new_ref`): its reads and writes are
  local, but the jaxpr is not pure until they are discharged."""


debug_effect, ordered_debug_effect = DebugEffect(), OrderedDebugEffect()
io_effect, ordered_io_effect = IOEffect(), OrderedIOEffect()
internal_mutable_array_effect = InternalMutableArrayEffect()

# `effect_rules[prim](*in_avals, **params) -> set of effects`. A primitive
# without one is pure, unless its params hold jaxprs: then it has theirs.
effect_rules: dict = {}


def def_effects(prim, rule: Callable):
  effect_rules[prim] = rule
  return rule


def eqn_effects(eqn) -> frozenset:
  """The effects of one equation, Ref effects indexed by its inputs."""
  rule = effect_rules.get(eqn.primitive)
  if rule is not None:
    return frozenset(rule(*[x.aval for x in eqn.inputs], **eqn.params))
  return frozenset().union(*(_inner_effects(v) for v in eqn.params.values()))


def _inner_effects(v) -> frozenset:
  v = getattr(v, "jaxpr", v)   # a ClosedJaxpr's Jaxpr (this module sits below jaxpr's)
  if hasattr(v, "eqns"):   # a Jaxpr. A Ref effect names an input of the inner jaxpr:
    return frozenset(e for e in v.effects if not isinstance(e, RefEffect))
  if isinstance(v, (tuple, list)):   # cond's branches
    return frozenset().union(*map(_inner_effects, v))
  return frozenset()


def jaxpr_effects(jaxpr) -> frozenset:
  """The union of the equations' effects. A Ref effect on an equation's input
  becomes one on the jaxpr's input it reads, or disappears if the Ref was
  made inside (that leaves an InternalMutableArrayEffect behind)."""
  position = {v: i for i, v in enumerate(jaxpr.constvars + jaxpr.invars)}
  out = set()
  for eqn in jaxpr.eqns:
    for e in eqn_effects(eqn) | inner_ref_effects(eqn):
      if isinstance(e, RefEffect):
        i = position.get(eqn.inputs[e.input_index])
        if i is not None:
          out.add(type(e)(i))
      else:
        out.add(e)
  return frozenset(out)


def inner_ref_effects(eqn) -> set:
  """Ref effects of a higher-order equation's jaxprs, on Refs it is passed
  (a loop whose body writes a Ref from outside), re-indexed to the
  equation's inputs: inner input i is outer input i + offset."""
  rule = inner_jaxprs.get(eqn.primitive)
  if rule is None:
    if "jaxpr" not in eqn.params:
      return set()
    rule = lambda params: [(params["jaxpr"], 0)]
  out = set()
  for j, offset in rule(eqn.params):
    j = getattr(j, "jaxpr", j)
    out.update(type(e)(e.input_index + offset) for e in j.effects if isinstance(e, RefEffect))
  return out


# `inner_jaxprs[prim](params) -> [(jaxpr, offset), ...]`: the jaxprs of a
# higher-order primitive whose inputs are its own from `offset` on. Without
# a rule, a `jaxpr` param whose inputs are the equation's (jit, scan).
inner_jaxprs: dict = {}


def is_ordered(effects) -> bool:
  return any(isinstance(e, OrderedEffect) for e in effects)


def has_effects(eqn) -> bool:
  return bool(eqn_effects(eqn))

