"""What cond, while and scan share: the small primitives select_n and clamp,
closure conversion of functions into jaxprs, lowering regions, and helpers of
the rules every higher-order primitive registers. (JVP and batching of a
jaxpr live beside their interpreters: `ad.jvp_jaxpr`, `batching.batch_jaxpr`.)"""
from __future__ import annotations

import numpy as np

from .. import ad, batching, dtypes, lax, lowering
from ..ad import Zero, instantiate_zeros
from ..batching import move_batch_axis, not_mapped
from ..core import (Primitive, ShapedArray, Tracer, abstract_eval_rules, get_aval,
                    impl_rules, raise_to_shaped)
from ..flop_count import flops_rules
from ..jaxpr import ClosedJaxpr, Jaxpr, Var
from ..lowering import mlir_type
from ..partial_eval import closed_to_call_jaxpr, trace_to_jaxpr
from ..tree_util import flatten_fun


# --- Small first-order primitives: select_n and clamp -------------------------------------

select_n_p = Primitive("select_n")
clamp_p = Primitive("clamp")


def select_n(which, *cases):
  """`cases[which]`, elementwise. `which` is bool (two cases) or int32, a
  scalar or of the cases' shape. As jax.lax.select_n."""
  if not cases:
    raise ValueError("select_n needs at least one case")
  return select_n_p.bind(which, *cases)


def _select_n_impl(which, *cases):
  which = np.asarray(which)
  if which.dtype == np.bool_:
    return np.where(which, cases[1], cases[0]) if len(cases) == 2 else np.asarray(cases[0])
  which = np.clip(which, 0, len(cases) - 1)
  return np.choose(which, [np.asarray(c) for c in cases])


def _select_n_abstract_eval(which, *cases):
  c0 = cases[0]
  for c in cases[1:]:
    if c.shape != c0.shape or c.dtype != c0.dtype:
      raise TypeError(f"select_n: cases must have equal types, got {c0.str_short()} "
                      f"and {c.str_short()}")
  if which.dtype != np.bool_ and which.dtype.kind not in "iu":
    raise TypeError(f"select_n: the selector must be bool or an integer, got {which.str_short()}")
  if which.dtype == np.bool_ and len(cases) > 2:
    raise TypeError("select_n: a bool selector picks between at most two cases")
  if which.shape and which.shape != c0.shape:
    raise TypeError(f"select_n: the selector {which.str_short()} must be a scalar or "
                    f"have the cases' shape {c0.str_short()}")
  return ShapedArray(c0.shape, c0.dtype, all(c.weak_type for c in cases))


_typed_select_n_impl = lax.typed_impl(select_n_p, _select_n_impl)


def _select_n_eager(which, *cases):
  """The impl, with a fast path for the common eager case (a bool mask and
  two NumPy arrays of one type, which need no type check)."""
  plain = lambda c: type(c) in lax.NUMPY_TYPES
  if (len(cases) == 2 and type(which) is np.ndarray and which.dtype == np.bool_
      and plain(cases[0]) and plain(cases[1])
      and cases[0].dtype == cases[1].dtype and cases[0].shape == cases[1].shape
      and which.shape in ((), cases[0].shape)
      and cases[0].dtype in dtypes.SUPPORTED):
    return np.where(which, cases[1], cases[0])
  return _typed_select_n_impl(which, *cases)


impl_rules[select_n_p] = _select_n_eager
abstract_eval_rules[select_n_p] = _select_n_abstract_eval


def _select_n_jvp(primals, tangents):
  which, *cases = primals
  out = select_n(which, *cases)
  if all(type(t) is Zero for t in tangents[1:]):
    return out, Zero.from_value(out)
  return out, select_n(which, *[instantiate_zeros(t) for t in tangents[1:]])


def _select_n_transpose(ct, which, *cases):
  if ad.is_undefined_primal(which):
    raise ValueError("select_n is not linear in its selector")
  zeros = np.zeros(np.shape(ct), np.result_type(get_aval(ct).dtype))
  return [None] + [select_n(which, *[ct if j == i else zeros for j in range(len(cases))])
                   if ad.is_undefined_primal(c) else None for i, c in enumerate(cases)]


def _select_n_vmap(axis_size, vals_in, dims_in):
  which, *cases = vals_in
  wdim, *cdims = dims_in
  case_shape = _unbatched_shape(cases[0], cdims[0])
  shape = (axis_size, *case_shape)
  cases = [move_batch_axis(axis_size, d, 0, c) for c, d in zip(cases, cdims)]
  if wdim is not_mapped and np.ndim(which) == 0:
    return select_n(which, *cases), 0
  which = move_batch_axis(axis_size, wdim, 0, which)
  if np.ndim(which) == 1 and case_shape:   # one selector per batch element
    which = lax.broadcast(which, shape, range(1, len(shape)))
  return select_n(which, *cases), 0


def _unbatched_shape(x, bdim):
  shape = list(np.shape(x))
  if bdim is not not_mapped:
    del shape[bdim]
  return tuple(shape)


ad.jvp_rules[select_n_p] = _select_n_jvp
ad.transpose_rules[select_n_p] = _select_n_transpose
batching.vmap_rules[select_n_p] = _select_n_vmap


def _select_n_lowering(ctx, which, *cases):
  wa, *cas = ctx.avals_in
  out = ctx.avals_out[0]
  t = mlir_type(out)
  if wa.shape != out.shape:
    which = ctx.broadcast_in_dim(which, wa, out.shape, [])
  wt = mlir_type(ShapedArray(out.shape, wa.dtype))
  bool_t = mlir_type(ShapedArray(out.shape, np.bool_))
  if len(cases) == 1:
    return cases[0]
  if wa.dtype == np.bool_:
    return ctx.emit(f"stablehlo.select {which}, {cases[1]}, {cases[0]} : {bool_t}, {t}")
  result = cases[0]
  for i in range(1, len(cases)):   # case i wins where which >= i (which is clamped)
    k = ctx.broadcast_in_dim(ctx.constant(i, wa.dtype), wa.update(shape=()), out.shape, [])
    pred = ctx.emit(f"stablehlo.compare GE, {which}, {k}, SIGNED : ({wt}, {wt}) -> {bool_t}")
    result = ctx.emit(f"stablehlo.select {pred}, {cases[i]}, {result} : {bool_t}, {t}")
  return result


lowering.lowering_rules[select_n_p] = _select_n_lowering
flops_rules[select_n_p] = lambda avals_in, avals_out, **_: 0   # moves data


def clamp(lo, x, hi):
  """`min(max(x, lo), hi)`, with scalar bounds. As jax.lax.clamp."""
  return clamp_p.bind(lo, x, hi)


impl_rules[clamp_p] = lax.typed_impl(
    clamp_p, lambda lo, x, hi: lax.python_scalar(
        np.asarray(np.clip(x, lo, hi), np.result_type(x)), lo, x, hi))


def _clamp_abstract_eval(lo, x, hi):
  for b in (lo, hi):
    if b.shape and b.shape != x.shape:
      raise TypeError(f"clamp: bounds must be scalars or shaped like the operand, got "
                      f"{b.str_short()} for {x.str_short()}")
  if not lo.dtype == x.dtype == hi.dtype:   # a Python scalar keeps its own dtype, as in JAX
    raise TypeError(
        f"lax.clamp requires arguments to have the same dtypes, got {lo.dtype}, "
        f"{x.dtype}, {hi.dtype}. Unlike the other lax operations, clamp doesn't let a "
        "Python scalar take the operand's dtype (JAX's neither): give the bounds in "
        "x's dtype (np.float32(1.5)), or use numpy.clip.")
  return ShapedArray(x.shape, x.dtype,
                     lo.weak_type and x.weak_type and hi.weak_type)


abstract_eval_rules[clamp_p] = _clamp_abstract_eval


def _clamp_jvp(primals, tangents):
  lo, x, hi = primals
  out = clamp(lo, x, hi)
  if np.result_type(get_aval(x).dtype).kind not in "fc":
    return out, Zero.from_value(out)
  # Whose tangent each element takes, as JAX's rule: x's strictly inside (at
  # a bound the slope is 0), lo's where lo > x (and lo < hi), hi's where x > hi.
  picks = (lax.bitwise_and(lax.greater(lo, x), lax.less(lo, hi)),
           lax.bitwise_and(lax.greater(x, lo), lax.less(x, hi)),
           lax.less(hi, x))
  shape = np.shape(out)
  full = lambda v: v if np.shape(v) == shape else lax.broadcast(
      v, shape, range(len(shape)))   # (a scalar bound)
  zeros = np.zeros(shape, get_aval(out).dtype)
  t = Zero.from_value(out)
  for pick, t_dot in zip(picks, tangents):
    if type(t_dot) is not Zero:
      t = ad.add_tangents(t, select_n(full(pick), zeros, full(t_dot)))
  return out, t


def _clamp_vmap(axis_size, vals_in, dims_in):
  lo, x, hi = vals_in
  dlo, dx, dhi = dims_in
  if dlo is not_mapped and dhi is not_mapped and np.ndim(lo) == 0 and np.ndim(hi) == 0:
    return clamp(lo, x, hi), dx
  shape = (axis_size, *_unbatched_shape(x, dx))
  def full(v, d):
    v = move_batch_axis(axis_size, d, 0, v)
    return v if np.shape(v) == shape else lax.broadcast(v, shape, range(1, len(shape)))
  return clamp(full(lo, dlo), full(x, dx), full(hi, dhi)), 0


ad.jvp_rules[clamp_p] = _clamp_jvp
batching.vmap_rules[clamp_p] = _clamp_vmap


def _clamp_lowering(ctx, lo, x, hi):
  alo, ax, ahi = ctx.avals_in
  lo, hi = ctx.convert(lo, alo, ax.dtype), ctx.convert(hi, ahi, ax.dtype)
  alo, ahi = alo.update(dtype=ax.dtype), ahi.update(dtype=ax.dtype)
  return ctx.emit(f"stablehlo.clamp {lo}, {x}, {hi} : ({mlir_type(alo)}, {mlir_type(ax)}, "
                  f"{mlir_type(ahi)}) -> {mlir_type(ctx.avals_out[0])}")


lowering.lowering_rules[clamp_p] = _clamp_lowering
flops_rules[clamp_p] = lambda avals_in, avals_out, **_: 0


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
