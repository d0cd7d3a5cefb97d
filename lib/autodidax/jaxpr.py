"""Jaxprs: the typed, first-order, A-normal-form IR that tracing produces.

    { lambda a:f32[3]; b:f32[]. let c:f32[3] = mul a b in (c,) }
             constvars   invars     equations          outvars

This module holds the data structures, the type checker, an evaluator written
with `bind` (so evaluating a jaxpr is itself traceable), and the printer.
"""
from __future__ import annotations

import html
import itertools
import types
from typing import NamedTuple

import numpy as np

from .effects import jaxpr_effects
from .core import (MissingRuleError, Primitive, ShapedArray, abstract_eval,
                   get_aval, mesh_axis_order, raise_to_shaped)


def as_shaped(aval) -> ShapedArray:
  """`raise_to_shaped`, but a ShapedArray is kept as it is, not copied: avals
  are never mutated, so sharing one is safe (and staging makes many)."""
  return aval if type(aval) is ShapedArray else raise_to_shaped(aval)


class Var:
  """A variable, bound exactly once. Its name is given when printed."""
  __slots__ = ["aval"]

  def __init__(self, aval: ShapedArray):
    self.aval = as_shaped(aval)

  def __repr__(self):
    return f"Var({self.aval.str_short()})"


class Lit:
  """A literal: a scalar constant written inline in an equation."""
  __slots__ = ["val", "aval"]

  def __init__(self, val, aval: ShapedArray | None = None):
    self.val = val   # `aval`, if given, is val's (saves recomputing it)
    self.aval = raise_to_shaped(get_aval(val)) if aval is None else as_shaped(aval)

  def __repr__(self):
    return f"Lit({fmt_literal(self.val)})"


Atom = Var | Lit   # what an equation reads: a variable or an inline literal


class JaxprEqn(NamedTuple):
  """`out_binders = primitive[params] inputs`: one primitive application."""
  primitive: Primitive
  inputs: list          # Atoms
  params: dict
  out_binders: list     # Vars, one per output


class Jaxpr:
  """`constvars` and `invars` are both inputs; constvars are, by convention,
  bound to the constants a ClosedJaxpr carries."""

  def __init__(self, constvars, invars, eqns, outvars, effects=None):
    self.constvars, self.invars = list(constvars), list(invars)
    self.eqns, self.outvars = list(eqns), list(outvars)
    # Declared effects (checked by typecheck_jaxpr); by default, the equations'.
    self._effects = None if effects is None else frozenset(effects)

  in_avals = property(lambda self: [v.aval for v in self.invars])
  out_avals = property(lambda self: [x.aval for x in self.outvars])

  @property
  def effects(self) -> frozenset:
    """What running the jaxpr does besides computing (autodidax.effects)."""
    if self._effects is not None:
      return self._effects
    return jaxpr_effects(self)

  def __repr__(self):
    return pp_jaxpr(self)

  def _repr_html_(self):
    return _pre_html(pp_jaxpr(self))


class ClosedJaxpr:
  """A jaxpr together with the values of its constvars."""

  def __init__(self, jaxpr: Jaxpr, consts):
    if len(jaxpr.constvars) != len(consts):   # e.g. a builder that forgot a const's value
      raise ValueError(f"ClosedJaxpr: {len(jaxpr.constvars)} constvars but {len(consts)} "
                       "consts: every constvar needs its value, in the same order")
    self.jaxpr, self.consts = jaxpr, list(consts)

  in_avals = property(lambda self: self.jaxpr.in_avals)
  out_avals = property(lambda self: self.jaxpr.out_avals)
  eqns = property(lambda self: self.jaxpr.eqns)
  effects = property(lambda self: self.jaxpr.effects)

  def __call__(self, *args):
    return eval_jaxpr(self.jaxpr, self.consts, *args)

  def __repr__(self):
    return pp_jaxpr(self.jaxpr)

  def _repr_html_(self):
    return _pre_html(pp_jaxpr(self.jaxpr))


def _pre_html(text: str) -> str:
  return f'<pre class="jaxpr">{html.escape(text)}</pre>'


# --- Type checking ------------------------------------------------------------------------

class JaxprTypeError(TypeError):
  pass


class JaxprType(NamedTuple):
  in_types: list
  out_types: list

  def __repr__(self):
    ins = ", ".join(a.str_short() for a in self.in_types)
    outs = ", ".join(a.str_short() for a in self.out_types)
    return f"({ins}) -> ({outs})"


def typecheck_jaxpr(jaxpr: Jaxpr) -> JaxprType:
  """Check binding (each variable bound once, before use) and types
  (each equation's output binders match its primitive's abstract eval)."""
  names = VarNames()   # the names pp_jaxpr would print
  for v in jaxpr.constvars + jaxpr.invars + [v for e in jaxpr.eqns for v in e.out_binders]:
    names[v]
  env: set = set()

  def bind_var(v: Var, where):
    if v in env:
      raise JaxprTypeError(f"variable {names[v]} is bound twice ({where})")
    env.add(v)

  for v in jaxpr.constvars + jaxpr.invars:
    bind_var(v, "as an input")
  for eqn in jaxpr.eqns:
    where = _Where(eqn, names)   # printed only if there is an error
    in_types = [typecheck_atom(env, x, names, where) for x in eqn.inputs]
    try:
      out_types = abstract_eval(eqn.primitive, in_types, eqn.params)
    except MissingRuleError:
      raise
    except Exception as e:
      raise JaxprTypeError(f"{where}: {e}") from None
    if not eqn.primitive.multiple_results:
      out_types = [out_types]
    if len(out_types) != len(eqn.out_binders):
      raise JaxprTypeError(f"{where}: {eqn.primitive.name} produces "
                           f"{len(out_types)} outputs, but {len(eqn.out_binders)} are bound")
    for v, t in zip(eqn.out_binders, out_types):
      if raise_to_shaped(t) != v.aval:
        # str_short hides weak_type; when only that differs, show it
        show = (repr if v.aval.str_short() == t.str_short() else lambda a: a.str_short())
        raise JaxprTypeError(
            f"{where}: {names[v]} is declared {show(v.aval)} but "
            f"{eqn.primitive.name} produces {show(raise_to_shaped(t))}")
    for v in eqn.out_binders:
      bind_var(v, where)
  out_types = [typecheck_atom(env, x, names, "in the outputs") for x in jaxpr.outvars]
  _check_effects(jaxpr)
  return JaxprType([v.aval for v in jaxpr.invars], out_types)


def _check_effects(jaxpr: Jaxpr):
  """Declared effects (autodidax.effects) must cover the equations'."""
  if jaxpr._effects is not None:
    missing = jaxpr_effects(jaxpr) - jaxpr._effects
    if missing:
      raise JaxprTypeError(f"the equations have effects {sorted(map(repr, missing))} "
                           f"that the jaxpr doesn't declare ({set(jaxpr._effects) or '{}'})")


class _Where:
  def __init__(self, eqn, names):
    self.eqn, self.names = eqn, names

  def __str__(self):
    return f"in equation `{pp_eqn(self.eqn, self.names)}`"

  __format__ = lambda self, spec: str(self)


def typecheck_atom(env: set, x: Atom, names=None, where="") -> ShapedArray:
  if isinstance(x, Var):
    if x not in env:
      name = names[x] if names is not None else repr(x)
      raise JaxprTypeError(f"{where}: variable {name} is unbound (used before "
                           "it is defined, or never defined)")
    return x.aval
  if isinstance(x, Lit):
    return x.aval
  raise JaxprTypeError(f"{where}: {x!r} is not an atom (a Var or a Lit)")


# --- Evaluation ---------------------------------------------------------------------------

def eval_jaxpr(jaxpr: Jaxpr, consts, *args) -> list:
  """Run a jaxpr. It binds every primitive, so it can itself be transformed."""
  env: dict = {}

  def read(x: Atom):
    return x.val if type(x) is Lit else env[x]

  def write(v: Var, val):
    env[v] = val

  for v, val in itertools.chain(zip(jaxpr.constvars, consts), zip(jaxpr.invars, args)):
    write(v, val)
  for eqn in jaxpr.eqns:
    outs = eqn.primitive.bind(*map(read, eqn.inputs), **eqn.params)
    for v, val in zip(eqn.out_binders, outs if eqn.primitive.multiple_results else [outs]):
      write(v, val)
  return [read(x) for x in jaxpr.outvars]


def jaxpr_as_fun(closed: ClosedJaxpr):
  return lambda *args: eval_jaxpr(closed.jaxpr, closed.consts, *args)


# --- Printing -------------------------------------------------------------------------------

class VarNames:
  """Names a, b, ..., z, ba, bb, ... in order of first appearance."""

  def __init__(self):
    self._names: dict = {}
    self.used: set = set()   # the variables read (pp_jaxpr fills it in)
    self.unused: set = set()   # binders of the outer jaxpr that nothing reads: `_`

  def __getitem__(self, v: Var) -> str:
    if not isinstance(v, Var):   # not a sequence: `for n in names` would never end
      raise TypeError(f"VarNames gives the names of Vars, not of {type(v).__name__}s")
    if v in self.unused:   # as JAX prints them (not in nested jaxprs, as JAX)
      return "_"
    if v not in self._names:
      self._names[v] = _nth_name(len(self._names))
    return self._names[v]


def _nth_name(n: int) -> str:
  letters = "abcdefghijklmnopqrstuvwxyz"
  s = letters[n % 26]
  n //= 26
  while n:
    s = letters[n % 26] + s
    n //= 26
  return s


def fmt_literal(val) -> str:
  v = np.asarray(val)
  if v.dtype == np.bool_:
    return str(bool(v))
  if np.issubdtype(v.dtype, np.floating):
    return repr(float(v))
  return str(int(v))


def _pp_atom(x: Atom, names: VarNames) -> str:
  if isinstance(x, Lit):
    return f"{fmt_literal(x.val)}:{x.aval.str_short()}"
  if not isinstance(x, Var):   # not an atom (the type checker reports it): show it as is
    return f"<{x!r:.40}>"
  return names[x]


def pp_param(v, names: "VarNames", indent: int, column: int | None = None) -> str:
  """`v` as a parameter printed at `column` (after its `key=`), in an
  equation indented by `indent`."""
  if isinstance(v, np.dtype):
    return v.name
  if isinstance(v, str):
    return v
  if isinstance(v, types.FunctionType):   # e.g. a checkpoint policy: its name,
    return v.__qualname__                 # not an address that changes each run
  if isinstance(v, (Jaxpr, ClosedJaxpr)):
    inner = v.jaxpr if isinstance(v, ClosedJaxpr) else v
    return pp_jaxpr(inner, indent=indent, names=names, column=column)
  if isinstance(v, tuple) and v and all(isinstance(e, (Jaxpr, ClosedJaxpr)) for e in v):
    pad = " " * (indent + 2)
    return "(\n" + "\n".join(pad + pp_param(e, names, indent + 2) for e in v) + "\n" + " " * indent + ")"
  if isinstance(v, tuple):
    return "(" + ", ".join(map(str, v)) + ("," if len(v) == 1 else "") + ")"
  return repr(v)


def has_jaxpr(v) -> bool:
  return isinstance(v, (Jaxpr, ClosedJaxpr)) or (
      isinstance(v, tuple) and any(isinstance(e, (Jaxpr, ClosedJaxpr)) for e in v))


# A primitive whose parameters print otherwise than sorted by name (a rule
# shown by its name, a parameter hidden) registers `rule(params) -> [(name,
# value), ...]` here; JAX's core.pp_eqn_rules plays this part.
pp_params_rules: dict = {}


def eqn_params(eqn: JaxprEqn) -> list:
  """The parameters of `eqn` as printed: (name, value) pairs, in order."""
  rule = pp_params_rules.get(eqn.primitive)
  return rule(eqn.params) if rule is not None else sorted(eqn.params.items())


# `pp_eqn_rules[prim](eqn, names, pp_atom) -> str`: a primitive that prints
# its own way (a Ref's reads and writes: `c:f32[] <- b[...]`).
pp_eqn_rules: dict = {}


def pp_eqn(eqn: JaxprEqn, names: VarNames, indent: int = 4) -> str:
  """One equation. Params holding jaxprs go one per line, as JAX prints them."""
  if eqn.primitive in pp_eqn_rules:
    return pp_eqn_rules[eqn.primitive](eqn, names, lambda x: _pp_atom(x, names))
  lhs = " ".join(f"{names[v]}:{v.aval.str_short()}" for v in eqn.out_binders)
  args = " ".join(_pp_atom(x, names) for x in eqn.inputs)
  items = eqn_params(eqn)
  if any(has_jaxpr(v) for _, v in items):
    pad = " " * (indent + 2)
    mesh = getattr(eqn.params.get("mesh"), "axis_names", ())   # a shard_map's: vma's order
    with mesh_axis_order(mesh):
      lines = "\n".join(f"{pad}{k}={pp_param(v, names, indent + 2, len(pad) + len(k) + 1)}"
                        for k, v in items)
    params = f"[\n{lines}\n{' ' * indent}]"
  else:
    params = " ".join(f"{k}={pp_param(v, names, indent)}" for k, v in items)
    params = f"[{params}]" if params else ""
  lhs = f"{lhs} = " if lhs else ""   # an equation for its effect only binds nothing
  return f"{lhs}{eqn.primitive.name}{params}{' ' + args if args else ''}"


def pp_jaxpr(jaxpr: Jaxpr, width: int = 80, indent: int = 0, names: VarNames | None = None,
             column: int | None = None) -> str:
  """Print like JAX: on one line when it fits in `width`, else one equation a
  line. `indent` is the indentation of nested jaxprs' lines, `column` the
  column the jaxpr starts at (after a `key=`; by default, `indent`)."""
  outermost, names = names is None, names or VarNames()
  names.used.update(x for e in jaxpr.eqns for x in e.inputs if type(x) is Var)
  names.used.update(x for x in jaxpr.outvars if type(x) is Var)
  if outermost:
    names.unused = {v for e in jaxpr.eqns for v in e.out_binders} - names.used
  binders = lambda vs: " ".join(f"{names[v]}:{v.aval.str_short()}" for v in vs)
  head = f"{{ lambda {binders(jaxpr.constvars)}; {binders(jaxpr.invars)}. let"
  eqns = [pp_eqn(e, names, indent + 4) for e in jaxpr.eqns]
  outs = ", ".join(_pp_atom(x, names) for x in jaxpr.outvars)
  outs = f"({outs}{',' if len(jaxpr.outvars) == 1 else ''})"
  one_line = f"{head} {'; '.join(eqns)} in {outs} }}"
  if len(one_line) + (indent if column is None else column) <= width and "\n" not in one_line:
    return one_line
  pad = " " * indent
  body = "\n".join(f"{pad}    {e}" for e in eqns)
  return f"{head}\n{body}\n{pad}  in {outs} }}"
