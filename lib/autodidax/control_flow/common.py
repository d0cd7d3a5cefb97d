"""What cond, while and scan share: closure conversion of functions into jaxprs, lowering regions, and helpers of
the rules every higher-order primitive registers. (JVP and batching of a
jaxpr live beside their interpreters: `ad.jvp_jaxpr`, `batching.batch_jaxpr`.)"""
from __future__ import annotations

import numpy as np

from .. import ad, batching, dtypes, lowering
from .. import primitives as lax
from ..ad import Zero, instantiate_zeros
from ..batching import move_batch_axis, not_mapped
from ..core import (Primitive, ShapedArray, Tracer, abstract_eval_rules, get_aval,
                    impl_rules, raise_to_shaped)
from ..flop_count import flops_rules
from ..jaxpr import ClosedJaxpr, Jaxpr, Var
from ..lowering import mlir_type
from ..partial_eval import closed_to_call_jaxpr, trace_to_jaxpr
from ..tree_util import flatten_fun


# --- Tracing functions into jaxprs: closure conversion ---------------------------------------

def trace_flat(fun_flat, in_avals) -> tuple[Jaxpr, list]:
  """Stage `fun_flat` and make its constvars leading invars (closure
  conversion): returns a jaxpr without constvars and the values to pass for
  its first `len(consts)` inputs. Consts may be tracers of outer traces."""
  return closed_to_call_jaxpr(*trace_to_jaxpr(fun_flat, list(in_avals)))


def trace_tree(fun, in_tree, in_avals):
  flat_fun, out_tree = flatten_fun(fun, in_tree)
  jaxpr, consts = trace_flat(flat_fun, in_avals)
  return jaxpr, consts, out_tree()


def as_closed(jaxpr: Jaxpr) -> ClosedJaxpr:
  return ClosedJaxpr(jaxpr, [])


def avals_str(avals) -> str:
  return "(" + ", ".join(a.str_short() for a in avals) + ")"


def same_type(a, b) -> bool:
  return a.shape == b.shape and a.dtype == b.dtype


def layout(a):
  """The mesh axes cutting each dimension on Explicit axes (None off a mesh:
  a host constant, which fits any layout, as in JAX)."""
  s = getattr(a, "sharding", None)
  return s.spec.normalized(a.ndim) if s is not None else None


def carry_out(carry, body_out):
  """A loop's carry as it leaves: an initial value off the mesh takes the body's
  layout (JAX's loops return the body's types)."""
  return [raise_to_shaped(a) if layout(a) is not None or layout(b) is None
          else raise_to_shaped(a).update(sharding=b.sharding) for a, b in zip(carry, body_out)]


def weak_fix(in_avals, out_avals):
  """For a loop carry: the (shape-preserving) dtype a weakly-typed initial
  value must be converted to so that the carry keeps one type, or None."""
  fixes = []
  for a, b in zip(in_avals, out_avals):
    if a.weak_type and a.shape == b.shape and (a.dtype != b.dtype or not b.weak_type):
      fixes.append(b.dtype)
    else:
      fixes.append(None)
  return fixes


def convert_leaves(xs, dtypes):
  """Convert leaves to dtypes; known values are converted now, not staged."""
  return [x if dt is None else lax.convert_element_type(x, dt) if isinstance(x, Tracer)
          else np.asarray(x).astype(dt) for x, dt in zip(xs, dtypes)]


def join_consts(jaxprs_consts: list) -> tuple[list, list]:
  """Branches traced separately each have their own consts; give every branch
  all of them (the others' as unused inputs), as cond needs one operand list.
  `[(jaxpr, consts), ...]` -> `(jaxprs, all_consts)`: each jaxpr takes
  `all_consts` first, then its own other inputs."""
  all_consts = [c for _, cs in jaxprs_consts for c in cs]
  out = []
  for j, cs in jaxprs_consts:
    n = len(cs)
    pre = [Var(v.aval) for jj, cc in jaxprs_consts[:len(out)] for v in jj.invars[:len(cc)]]
    post = [Var(v.aval) for jj, cc in jaxprs_consts[len(out) + 1:] for v in jj.invars[:len(cc)]]
    out.append(Jaxpr([], pre + j.invars[:n] + post + j.invars[n:], j.eqns, j.outvars))
  return out, all_consts


# --- Helpers of the JVP and batching rules ----------------------------------------------------

def is_float(aval) -> bool:
  return np.dtype(aval.dtype).kind in "fc"


def permute_invars(j: Jaxpr, order) -> Jaxpr:
  return Jaxpr([], [j.invars[i] for i in order], j.eqns, j.outvars)


def nonzero_mask(tangents) -> list:
  return [type(t) is not Zero for t in tangents]


def at_axis0(axis_size, x, d):
  return x if d is not_mapped else move_batch_axis(axis_size, d, 0, x)


# --- cond: lowering ---------------------------------------------------------------------------

def lower_region(ctx, jaxpr: Jaxpr, in_names: list, indent: str = "      ",
                 token: str | None = None) -> tuple[list, list]:
  """Lower `jaxpr` into a fresh list of lines (a region body). Given a
  `token`, its ordered effects start from it, and the last token comes
  first among the outputs."""
  sub = ctx.sub_context(token)
  outs = lowering.lower_jaxpr_body(sub, jaxpr, dict(zip(jaxpr.invars, in_names)))
  if token is not None:
    outs = [sub.token, *outs]
  return [indent + line.replace("\n", "\n" + indent) for line in sub.lines], outs


def result_names(ctx, n):
  name = ctx.fresh()
  return (f"{name}:{n}" if n > 1 else name), ([f"{name}#{i}" for i in range(n)] if n > 1 else [name])


def return_op(outs, avals, indent="      "):
  types = ", ".join(mlir_type(a) for a in avals)
  return f'{indent}"stablehlo.return"({", ".join(outs)}) : ({types}) -> ()'


# --- cond: partial evaluation and transposition (grad) ---------------------------------------

def zeros_of(aval):
  z = np.zeros((), aval.dtype)
  return z if not aval.shape else lax.broadcast(z, aval.shape, range(len(aval.shape)))
