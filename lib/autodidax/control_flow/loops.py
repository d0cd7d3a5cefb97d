"""while_loop, fori_loop and scan: one equation holding the body's jaxpr."""
from __future__ import annotations

import numpy as np

from .. import ad, batching, effects, lowering, state
from .. import primitives as lax
from ..flop_count import flops_call_rules
from .. import partial_eval as pe
from ..ad import Zero, instantiate_zeros, jvp_jaxpr
from ..api_util import shaped_abstractify
from ..batching import batch_jaxpr, move_batch_axis, named_axis_rule, not_mapped
from ..core import (Primitive, ShapedArray, Tracer, abstract_eval_rules, get_aval,
                    impl_rules, raise_to_shaped)
from ..sharding_rules import keep_body_types
from ..effects import is_ordered
from ..jaxpr import Jaxpr, JaxprEqn, Var, eval_jaxpr
from ..lowering import mlir_type
from ..named_sharding import NamedSharding, P
from ..primitives import select_n
from ..tree_util import tree_flatten, tree_unflatten
from .common import (avals_str, as_closed, carry_out, convert_leaves, is_float, layout,
                     nonzero_mask, permute_invars, lower_region, result_names, return_op,
                     same_type, at_axis0, trace_flat, trace_tree, weak_fix)


# --- Which carries: the fixpoint every loop rule needs --------------------------------------------

def carry_fixpoint(carry: list, step) -> list:
  """Which carries of a loop have a property (a nonzero tangent, a batch axis,
  an unknown value), given which inputs have it. `step(carry)` says which carry
  outputs of one iteration have it; a carry that gets it keeps it, so start
  with the inputs' flags and iterate until nothing changes (a round that changes
  something adds a flag, so it ends).
  The while, scan and fori rules of jvp, vmap and partial eval all start here."""
  carry = list(carry)
  while True:
    new = [a or b for a, b in zip(carry, step(carry))]
    if new == carry:
      return carry
    carry = new


# --- while_loop and fori_loop ---------------------------------------------------------------------

while_p = Primitive("while", multiple_results=True)


def while_loop(cond_fun, body_fun, init_val):
  """`while cond_fun(val): val = body_fun(val)`, staged. The carry `val` is a
  pytree whose types body_fun must preserve."""
  init_flat, in_tree = tree_flatten(init_val)
  arg_tree = tree_flatten((init_val,))[1]   # the functions take the carry as one argument
  in_avals = [shaped_abstractify(x) for x in init_flat]
  body_j, body_c, body_tree = trace_tree(body_fun, arg_tree, in_avals)
  _check_carry("while_loop", "body_fun", in_tree, body_tree, in_avals, body_j.out_avals)
  fixes = weak_fix(in_avals, body_j.out_avals)
  if any(d is not None for d in fixes):   # a Python-scalar init: adopt the body's dtype
    init_flat = convert_leaves(init_flat, fixes)
    in_avals = [shaped_abstractify(x) for x in init_flat]
    body_j, body_c, body_tree = trace_tree(body_fun, arg_tree, in_avals)
  _check_carry("while_loop", "body_fun", in_tree, body_tree, in_avals, body_j.out_avals, strict=True)
  cond_j, cond_c, cond_tree = trace_tree(cond_fun, arg_tree, in_avals)
  if len(cond_j.outvars) != 1 or cond_j.out_avals[0].shape != () or (
      cond_j.out_avals[0].dtype != np.bool_):
    raise TypeError("while_loop: cond_fun must return a boolean scalar, but it returned "
                    f"{avals_str(cond_j.out_avals)}")
  outs = while_p.bind(*cond_c, *body_c, *init_flat, cond_jaxpr=as_closed(cond_j),
                      body_jaxpr=as_closed(body_j), cond_nconsts=len(cond_c),
                      body_nconsts=len(body_c))
  return tree_unflatten(in_tree, outs)


def _check_carry(what, fn, in_tree, out_tree, in_avals, out_avals, strict=False):
  if in_tree != out_tree:
    raise TypeError(f"{what}: {fn} must return a carry with the structure of the "
                    f"initial value, {in_tree}, but it returned {out_tree}")
  bad = [i for i, (a, b) in enumerate(zip(in_avals, out_avals))
         if a.shape != b.shape or (a.dtype != b.dtype and (strict or not a.weak_type))
         or None not in (layout(a), layout(b)) and layout(a) != layout(b)]   # host: any
  if bad:
    raise TypeError(f"{what}: {fn} must return a carry of the same types as the initial "
                    f"value, {avals_str(in_avals)}, but it returned {avals_str(out_avals)}. "
                    "The carry's shapes, dtypes and shardings can't change from one "
                    "iteration to the next.")


def fori_loop(lower, upper, body_fun, init_val):
  """`for i in range(lower, upper): val = body_fun(i, val)`. With concrete
  bounds it is a `scan` with a static trip count (so it differentiates in
  reverse mode); with traced bounds, a `while`."""
  def static(x):   # a Python/NumPy int, or a tracer whose value is known
    return not isinstance(x, Tracer) or type(x.aval).__name__ == "ConcreteArray"
  if static(lower) and static(upper):
    val = lambda x: x.aval.val if isinstance(x, Tracer) else x
    lower, upper = val(lower), val(upper)
    lo, hi = int(lower), int(upper)

    def step(carry, _):
      i, x = carry
      return (lax.add(i, np.int32(1)), body_fun(i, x)), None
    (_, out), _ = scan(step, (np.int32(lo), init_val), None, length=max(hi - lo, 0))
    return out
  lower = _as_int32(lower)
  upper = _as_int32(upper)

  def cond_fun(carry):
    i, hi, _ = carry
    return lax.less(i, hi)

  def body(carry):
    i, hi, x = carry
    return lax.add(i, np.int32(1)), hi, body_fun(i, x)
  return while_loop(cond_fun, body, (lower, upper, init_val))[2]


def _as_int32(x):
  aval = get_aval(x)
  if aval.shape != () or aval.dtype.kind not in "iu":
    raise TypeError(f"fori_loop: bounds must be integer scalars, got {aval.str_short()}")
  if not isinstance(x, Tracer):
    return np.int32(np.asarray(x))
  return x if aval.dtype == np.int32 else lax.convert_element_type(x, np.int32)


def _while_impl(*args, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts, run=eval_jaxpr):
  cc, bc, carry = args[:cond_nconsts], args[cond_nconsts:cond_nconsts + body_nconsts], \
      list(args[cond_nconsts + body_nconsts:])
  while bool(np.asarray(run(cond_jaxpr.jaxpr, [], *cc, *carry)[0])):
    carry = run(body_jaxpr.jaxpr, [], *bc, *carry)
  return carry


def _while_abstract_eval(*args, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
  cc, bc = args[:cond_nconsts], args[cond_nconsts:cond_nconsts + body_nconsts]
  carry = args[cond_nconsts + body_nconsts:]
  for name, j, ins in (("cond_jaxpr", cond_jaxpr, cc + carry), ("body_jaxpr", body_jaxpr, bc + carry)):
    if len(j.in_avals) != len(ins) or any(not same_type(a, b) for a, b in zip(j.in_avals, ins)):
      raise TypeError(f"while: {name} takes {avals_str(j.in_avals)} but gets {avals_str(ins)}")
  outs = body_jaxpr.out_avals
  if len(outs) != len(carry) or any(not same_type(a, b) for a, b in zip(outs, carry)):
    raise TypeError(f"while: the body returns {avals_str(outs)} but the carry is "
                    f"{avals_str(carry)}")
  p = cond_jaxpr.out_avals
  if len(p) != 1 or p[0].shape != () or p[0].dtype != np.bool_:
    raise TypeError(f"while: cond_jaxpr must return one bool[], got {avals_str(p)}")
  return carry_out(carry, outs)


impl_rules[while_p] = _while_impl
flops_call_rules[while_p] = _while_impl   # with a `run` that counts: every trip
abstract_eval_rules[while_p] = _while_abstract_eval
keep_body_types(while_p)   # its results' types, shardings included, are its body's


def _while_jvp(primals, tangents, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
  cond_jaxpr, body_jaxpr = state.discharged_inner(cond_jaxpr), state.discharged_inner(body_jaxpr)
  nc, nb = cond_nconsts, body_nconsts
  bconsts, carry = primals[nc:nc + nb], primals[nc + nb:]
  nz = [t and is_float(get_aval(x)) for t, x in zip(nonzero_mask(tangents), primals)]
  bconsts_nz, carry_nz = nz[nc:nc + nb], nz[nc + nb:]
  carry_nz = carry_fixpoint(carry_nz, lambda c: jvp_jaxpr(
      body_jaxpr.jaxpr, tuple(bconsts_nz + c), tuple(c))[2])
  bj, bjc, _ = jvp_jaxpr(body_jaxpr.jaxpr, tuple(bconsts_nz + carry_nz), tuple(carry_nz))
  k, nbc, ncar = len(bjc), sum(bconsts_nz), sum(carry_nz)
  # bj's inputs: jvp consts, bconsts, carry, bconsts_dot, carry_dot. Reorder to
  # consts (jvp consts, bconsts, bconsts_dot) then carry (carry, carry_dot).
  order = (list(range(k + nb)) + list(range(k + nb + len(carry), k + nb + len(carry) + nbc))
           + list(range(k + nb, k + nb + len(carry)))
           + list(range(k + nb + len(carry) + nbc, k + nb + len(carry) + nbc + ncar)))
  bj = permute_invars(bj, order)
  cj = cond_jaxpr.jaxpr
  cj = Jaxpr([], cj.invars + [Var(a) for a, z in zip(cj.in_avals[nc:], carry_nz) if z],
             cj.eqns, cj.outvars)
  dots = lambda ts, mask: [instantiate_zeros(t) for t, z in zip(ts, mask) if z]
  bconsts_dot = dots(tangents[nc:nc + nb], bconsts_nz)
  carry_dot = [instantiate_zeros(t) if not type(t) is Zero else ad.zeros_like_aval(t.aval)
               for t, z in zip(tangents[nc + nb:], carry_nz) if z]
  outs = while_p.bind(*primals[:nc], *bjc, *bconsts, *bconsts_dot, *carry, *carry_dot,
                      cond_jaxpr=as_closed(cj), body_jaxpr=as_closed(bj), cond_nconsts=nc,
                      body_nconsts=k + nb + nbc)
  p_out, t_out = outs[:len(carry)], iter(outs[len(carry):])
  return p_out, [next(t_out) if z else Zero.from_value(p) for p, z in zip(p_out, carry_nz)]


ad.jvp_rules[while_p] = _while_jvp


def _while_vmap(axis_size, vals_in, dims_in, *, cond_jaxpr, body_jaxpr, cond_nconsts,
                body_nconsts):
  cond_jaxpr, body_jaxpr = state.discharged_inner(cond_jaxpr), state.discharged_inner(body_jaxpr)
  nc, nb = cond_nconsts, body_nconsts
  vals = [at_axis0(axis_size, x, d) for x, d in zip(vals_in, dims_in)]
  bat = [d is not not_mapped for d in dims_in]
  cc, bc, carry = vals[:nc], vals[nc:nc + nb], vals[nc + nb:]
  cc_b, bc_b, carry_b = bat[:nc], bat[nc:nc + nb], bat[nc + nb:]
  carry_b = carry_fixpoint(carry_b, lambda c: batch_jaxpr(
      body_jaxpr.jaxpr, axis_size, tuple(bc_b + c), tuple(c))[2])
  _, _, (pred_b,) = batch_jaxpr(cond_jaxpr.jaxpr, axis_size, tuple(cc_b + carry_b), (False,))
  if pred_b:   # elements finish at different times: every carry is batched
    carry_b = [True] * len(carry)
  carry = [move_batch_axis(axis_size, not_mapped, 0, x) if b and not was else x
           for x, b, was in zip(carry, carry_b, bat[nc + nb:])]
  bj, bjc, _ = batch_jaxpr(body_jaxpr.jaxpr, axis_size, tuple(bc_b + carry_b), tuple(carry_b))
  cj, cjc, _ = batch_jaxpr(cond_jaxpr.jaxpr, axis_size, tuple(cc_b + carry_b), (pred_b,))
  if not pred_b:
    outs = while_p.bind(*cjc, *cc, *bjc, *bc, *carry, cond_jaxpr=as_closed(cj),
                        body_jaxpr=as_closed(bj), cond_nconsts=len(cjc) + nc,
                        body_nconsts=len(bjc) + nb)
    return outs, [0 if b else not_mapped for b in carry_b]
  # A batched predicate: loop while any element's predicate holds; the body
  # updates only the elements whose predicate still holds (select_n).
  n = len(carry)

  def cond_any(*args):
    p = eval_jaxpr(cj, [], *args)[0]
    return [lax.greater(lax.reduce_max(lax.convert_element_type(p, np.int32), None),
                        np.int32(0))]

  def body_masked(*args):
    ccs, rest = args[:len(cjc) + nc], args[len(cjc) + nc:]
    bcs, xs = rest[:len(bjc) + nb], rest[len(bjc) + nb:]
    p = eval_jaxpr(cj, [], *ccs, *xs)[0]
    new = eval_jaxpr(bj, [], *bcs, *xs)
    outs = []
    for old, nw in zip(xs, new):
      shape = np.shape(old)
      which = p if len(shape) == 1 else lax.broadcast(p, shape, range(1, len(shape)))
      outs.append(select_n(which, old, nw))
    return outs

  carry_avals = [raise_to_shaped(get_aval(x)) for x in carry]
  c_avals = [v.aval for v in cj.invars]
  cond2, cond2_c = trace_flat(cond_any, c_avals)
  b_avals = c_avals[:len(cjc) + nc] + [v.aval for v in bj.invars[:len(bjc) + nb]] + carry_avals
  body2, body2_c = trace_flat(body_masked, b_avals)
  outs = while_p.bind(*cond2_c, *cjc, *cc, *body2_c, *cjc, *cc, *bjc, *bc, *carry,
                      cond_jaxpr=as_closed(cond2), body_jaxpr=as_closed(body2),
                      cond_nconsts=len(cond2_c) + len(cjc) + nc,
                      body_nconsts=len(body2_c) + len(cjc) + nc + len(bjc) + nb)
  return outs, [0] * n


batching.vmap_rules[while_p] = _while_vmap
batching.axis_vmap_rules[while_p] = named_axis_rule(_while_vmap)   # Many devices


def _while_lowering(ctx, *args, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
  nc, nb = cond_nconsts, body_nconsts
  cc, bc, init = args[:nc], args[nc:nc + nb], list(args[nc + nb:])
  avals = ctx.avals_in[nc + nb:]
  # Ordered effects in the body: the token is carried too, first.
  ordered = is_ordered(body_jaxpr.effects)
  if ordered:
    init, avals = [ctx.current_token(), *init], [lowering.abstract_token, *avals]
  lhs, names = result_names(ctx, len(avals))
  types = ", ".join(mlir_type(a) for a in avals)

  def block(j, consts, out_avals, threads_token):
    block_args = [ctx.fresh().replace("%", "%iter") for _ in avals]
    head = "^bb0(" + ", ".join(f"{a}: {mlir_type(v)}" for a, v in zip(block_args, avals)) + "):"
    carry = block_args[1:] if ordered else block_args
    lines, outs = lower_region(ctx, j.jaxpr, list(consts) + carry,
                               token=block_args[0] if threads_token else None)
    return "{\n    " + head + "\n" + "\n".join(lines + [return_op(outs, out_avals)]) + "\n    }"

  cond_r = block(cond_jaxpr, cc, cond_jaxpr.out_avals, False)
  body_r = block(body_jaxpr, bc, avals, ordered)
  ctx.emit(f'{lhs} = "stablehlo.while"({", ".join(init)}) ({cond_r}, {body_r}) : '
           f"({types}) -> ({types})", result=False)
  if ordered:
    ctx.token, names = names[0], names[1:]
  return names


lowering.lowering_rules[while_p] = _while_lowering


# Reverse mode. A while loop's trip count is only known by running it, so its
# forward pass can't save one residual per iteration in a fixed-size buffer:
# there is no transpose. Partial evaluation still works (linearize and jvp of
# jit need it): the known carries run in a loop of their own, and the whole
# loop is staged again for the unknown ones.

def _while_split(cond_jaxpr, body_jaxpr, nc, nb, unknowns):
  cc_uk, bc_uk, carry_uk = unknowns[:nc], unknowns[nc:nc + nb], list(unknowns[nc + nb:])
  carry_uk = carry_fixpoint(carry_uk, lambda c: pe.partial_eval_jaxpr(
      body_jaxpr.jaxpr, bc_uk + c)[2])
  _, _, (pred_uk,), _ = pe.partial_eval_jaxpr(cond_jaxpr.jaxpr, cc_uk + carry_uk)
  if pred_uk or all(carry_uk):
    return None
  cj1, _, _, _ = pe.partial_eval_jaxpr(cond_jaxpr.jaxpr, cc_uk + carry_uk)
  bj1, _, _, _ = pe.partial_eval_jaxpr(body_jaxpr.jaxpr, bc_uk + carry_uk, carry_uk)
  n_known = len(carry_uk) - sum(carry_uk)
  cj1 = Jaxpr([], cj1.invars, cj1.eqns, cj1.outvars[:1])      # drop residuals: the
  bj1 = Jaxpr([], bj1.invars, bj1.eqns, bj1.outvars[:n_known])  # known loop needs none
  params1 = dict(cond_jaxpr=as_closed(cj1), body_jaxpr=as_closed(bj1),
                 cond_nconsts=nc - sum(cc_uk), body_nconsts=nb - sum(bc_uk))
  return params1, carry_uk




def _while_partial_eval_jaxpr(unks_in, eqn):
  p = eqn.params
  nc, nb = p["cond_nconsts"], p["body_nconsts"]
  known_vars = [x for x, uk in zip(eqn.inputs, unks_in) if not uk and type(x) is Var]
  split = _while_split(p["cond_jaxpr"], p["body_jaxpr"], nc, nb, unks_in)
  if split is None:
    return None, eqn, [True] * len(eqn.out_binders), known_vars
  params1, carry_uk = split
  ins1 = [x for x, uk in zip(eqn.inputs, list(unks_in[:nc + nb]) + carry_uk) if not uk]
  outs1 = [v for v, uk in zip(eqn.out_binders, carry_uk) if not uk]
  outs2 = [v if uk else Var(v.aval) for v, uk in zip(eqn.out_binders, carry_uk)]
  eqn1 = JaxprEqn(while_p, ins1, params1, outs1)
  eqn2 = JaxprEqn(while_p, list(eqn.inputs), p, outs2)
  return eqn1, eqn2, carry_uk, known_vars


pe.partial_eval_jaxpr_rules[while_p] = _while_partial_eval_jaxpr


def _while_partial_eval(trace, tracers, **params):   # from the rule above
  return pe.partial_eval_by_jaxpr_rule(trace, while_p, tracers, params)


pe.partial_eval_rules[while_p] = _while_partial_eval


class WhileLoopReverseModeError(ValueError):
  pass


def _while_transpose(cts, *args, **params):
  raise WhileLoopReverseModeError(
      "Reverse-mode differentiation (grad, vjp) does not work for lax.while_loop, "
      "nor for fori_loop with traced bounds: the number of iterations is only known "
      "by running the loop, so the forward pass can't store one residual per "
      "iteration for the backward pass to read in reverse. Use lax.scan, or "
      "fori_loop with concrete (Python int) bounds, which becomes a scan; forward "
      "mode (jvp, jacfwd) works for while loops.")


ad.transpose_rules[while_p] = _while_transpose


# --- while_loop: discharge (a Ref its cond or body closes over becomes a carry) -----------------

def _discharge_while(eqn, vals, env):
  p = eqn.params
  nc, nb = p["cond_nconsts"], p["body_nconsts"]
  if any(isinstance(x.aval, state.AbstractRef) for x in eqn.inputs[nc + nb:]):
    raise NotImplementedError("while_loop: a Ref may be closed over, not carried")
  refs = state.ref_slots(eqn, range(nc + nb))
  cin, bin_ = eqn.inputs[:nc], eqn.inputs[nc:nc + nb]

  def cond_fun(carried):
    ref_vals, carry = carried
    outs, _ = state.run_discharged(
        p["cond_jaxpr"], state.substitute(cin, vals[:nc], refs, ref_vals) + list(carry),
        cin + eqn.inputs[nc + nb:])
    return outs[0]

  def body_fun(carried):
    ref_vals, carry = carried
    outs, finals = state.run_discharged(
        p["body_jaxpr"], state.substitute(bin_, vals[nc:nc + nb], refs, ref_vals) + list(carry),
        bin_ + eqn.inputs[nc + nb:])
    return state.updated(bin_, refs, ref_vals, finals), outs
  ref_vals, carry = while_loop(cond_fun, body_fun, ([env[r] for r in refs], vals[nc + nb:]))
  env.update(zip(refs, ref_vals))
  return list(carry)


state.discharge_rules[while_p] = _discharge_while
# A while's jaxprs take their consts, then the carry.
effects.inner_jaxprs[while_p] = lambda params: [
    (params["cond_jaxpr"], 0), (params["body_jaxpr"], params["cond_nconsts"])]


# --- scan ---------------------------------------------------------------------------------------

scan_p = Primitive("scan", multiple_results=True)


def scan(f, init, xs, length=None, reverse=False):
  """`carry, y = f(carry, x)` for each x along the leading axis of `xs`;
  returns the final carry and the stacked ys. As jax.lax.scan."""
  xs_flat, xs_tree = tree_flatten(xs)
  lengths = {np.shape(x)[0] if np.ndim(x) else None for x in xs_flat}
  if None in lengths:
    raise TypeError("scan: every leaf of xs must be an array with a leading axis to scan over")
  if length is not None:
    lengths.add(int(length))
  if len(lengths) > 1:
    raise ValueError(f"scan: xs leaves and length disagree on the length: {sorted(lengths)}")
  if not lengths:
    raise ValueError("scan: with no xs, pass length=")
  (length,) = lengths
  init_flat, init_tree = tree_flatten(init)
  init_avals = [shaped_abstractify(x) for x in init_flat]
  x_avals = [_unstacked(shaped_abstractify(x)) for x in xs_flat]

  pair = []   # the type of f's pair: scan returns the same (as JAX's)

  def body(carry, x):
    out = f(carry, x)
    if not isinstance(out, (tuple, list)) or len(out) != 2:
      raise TypeError("scan: f must return a pair (new_carry, y)")
    pair.append(type(out))
    return tuple(out)

  def trace(avals):
    def flat(*args):
      c = tree_unflatten(init_tree, args[:len(init_flat)])
      x = tree_unflatten(xs_tree, args[len(init_flat):])
      new_c, y = body(c, x)
      c_flat, c_tree = tree_flatten(new_c)
      y_flat, y_tree = tree_flatten(y)
      trees.append((c_tree, y_tree))
      return c_flat + y_flat
    trees: list = []
    j, consts = trace_flat(flat, avals + x_avals)
    return j, consts, trees[-1]

  j, consts, (c_tree, y_tree) = trace(init_avals)
  nc = len(init_flat)
  _check_carry("scan", "f", init_tree, c_tree, init_avals, j.out_avals[:nc])
  fixes = weak_fix(init_avals, j.out_avals[:nc])
  if any(d is not None for d in fixes):
    init_flat = convert_leaves(init_flat, fixes)
    init_avals = [shaped_abstractify(x) for x in init_flat]
    j, consts, (c_tree, y_tree) = trace(init_avals)
  _check_carry("scan", "f", init_tree, c_tree, init_avals, j.out_avals[:nc], strict=True)
  outs = scan_p.bind(*consts, *init_flat, *xs_flat, jaxpr=as_closed(j), num_consts=len(consts),
                     num_carry=nc, length=length, reverse=bool(reverse))
  carry = tree_unflatten(c_tree, outs[:nc])
  ys = tree_unflatten(y_tree, outs[nc:])
  kind = pair[-1]
  if kind is tuple:
    return carry, ys
  return [carry, ys] if kind is list else kind(carry, ys)   # (a namedtuple)


def _scan_impl(*args, jaxpr, num_consts, num_carry, length, reverse, run=eval_jaxpr):
  consts, carry = args[:num_consts], list(args[num_consts:num_consts + num_carry])
  xs = [np.asarray(x) for x in args[num_consts + num_carry:]]
  ys = [None] * length
  for i in (reversed(range(length)) if reverse else range(length)):
    outs = run(jaxpr.jaxpr, [], *consts, *carry, *[x[i] for x in xs])
    carry, ys[i] = outs[:num_carry], outs[num_carry:]
  y_avals = jaxpr.out_avals[num_carry:]
  stacked = [np.stack([np.asarray(y[k]) for y in ys]) if length else
             np.zeros((0, *a.shape), a.dtype) for k, a in enumerate(y_avals)]
  return [*carry, *[s.astype(a.dtype) for s, a in zip(stacked, y_avals)]]


def _scan_abstract_eval(*args, jaxpr, num_consts, num_carry, length, reverse):
  consts, carry = args[:num_consts], args[num_consts:num_consts + num_carry]
  xs = args[num_consts + num_carry:]
  for i, x in enumerate(xs):
    if not x.shape or x.shape[0] != length:
      raise TypeError(f"scan: xs operand {i} is {x.str_short()} but length is {length}")
  ins = list(consts) + list(carry) + [_unstacked(x) for x in xs]
  want = jaxpr.in_avals
  if len(want) != len(ins) or any(not same_type(a, b) for a, b in zip(want, ins)):
    raise TypeError(f"scan: the body takes {avals_str(want)} but gets {avals_str(ins)}")
  outs = jaxpr.out_avals
  c_out = outs[:num_carry]
  if any(not same_type(a, b) for a, b in zip(c_out, carry)):
    raise TypeError(f"scan: the body returns a carry {avals_str(c_out)} but the carry is "
                    f"{avals_str(carry)}; it must keep its type")
  return carry_out(carry, c_out) + [_stacked(a, length) for a in outs[num_carry:]]


def _stacked(y, length):
  """The type of a scan's stacked outputs: the body's, with a leading dimension that
  no mesh axis cuts."""
  s = y.sharding and NamedSharding(y.sharding.mesh, P(None, *y.sharding.spec.padded(y.ndim)))
  return y.update(shape=(length, *y.shape), sharding=s)


def _unstacked(x):
  """The type of one slice of a scan's `xs`: its leading dimension gone, with its
  place in the layout."""
  s = x.sharding and NamedSharding(x.sharding.mesh, P(*x.sharding.spec.padded(x.ndim)[1:]))
  return x.update(shape=x.shape[1:], sharding=s)


impl_rules[scan_p] = _scan_impl
flops_call_rules[scan_p] = _scan_impl   # with a `run` that counts: every iteration
abstract_eval_rules[scan_p] = _scan_abstract_eval
keep_body_types(scan_p)   # its results' types, shardings included, are its body's


def _scan_jvp(primals, tangents, *, jaxpr, num_consts, num_carry, length, reverse):
  jaxpr = state.discharged_inner(jaxpr)   # Refs made in the body: values
  nc, ncar = num_consts, num_carry
  nz = [t and is_float(get_aval(x)) for t, x in zip(nonzero_mask(tangents), primals)]
  consts_nz, carry_nz, xs_nz = nz[:nc], nz[nc:nc + ncar], nz[nc + ncar:]
  n_ys = len(jaxpr.out_avals) - ncar
  carry_nz = carry_fixpoint(carry_nz, lambda c: jvp_jaxpr(
      jaxpr.jaxpr, tuple(consts_nz + c + xs_nz), tuple(c + [False] * n_ys))[2][:ncar])
  j, jc, out_nz = jvp_jaxpr(jaxpr.jaxpr, tuple(consts_nz + carry_nz + xs_nz),
                             tuple(carry_nz + [False] * n_ys))
  k, nx = len(jc), len(primals) - nc - ncar
  a, b, c = sum(consts_nz), sum(carry_nz), sum(xs_nz)
  P = k + nc + ncar + nx   # where the tangent inputs start
  order = (list(range(k + nc)) + list(range(P, P + a))                       # consts
           + list(range(k + nc, k + nc + ncar)) + list(range(P + a, P + a + b))  # carry
           + list(range(k + nc + ncar, P)) + list(range(P + a + b, P + a + b + c)))  # xs
  ys_nz = out_nz[ncar:]
  n_out = ncar + n_ys
  outs = j.outvars
  t_out = outs[n_out:]
  new_outvars = outs[:ncar] + t_out[:b] + outs[ncar:n_out] + t_out[b:]
  j = Jaxpr([], [j.invars[i] for i in order], j.eqns, new_outvars)
  dots = lambda ts, mask: [instantiate_zeros(t) for t, z in zip(ts, mask) if z]
  consts_dot = dots(tangents[:nc], consts_nz)
  carry_dot = dots(tangents[nc:nc + ncar], carry_nz)
  xs_dot = dots(tangents[nc + ncar:], xs_nz)
  consts, carry, xs = primals[:nc], primals[nc:nc + ncar], primals[nc + ncar:]
  ops = [*jc, *consts, *consts_dot, *carry, *carry_dot, *xs, *xs_dot]
  res = scan_p.bind(*ops, jaxpr=as_closed(j), num_consts=k + nc + a, num_carry=ncar + b,
                    length=length, reverse=reverse)
  carry_out, carry_dot_out = res[:ncar], iter(res[ncar:ncar + b])
  ys, ys_dot = res[ncar + b:ncar + b + n_ys], iter(res[ncar + b + n_ys:])
  p_out = [*carry_out, *ys]
  t_out = ([next(carry_dot_out) if z else Zero.from_value(p) for p, z in zip(carry_out, carry_nz)]
           + [next(ys_dot) if z else Zero.from_value(p) for p, z in zip(ys, ys_nz)])
  return p_out, t_out


ad.jvp_rules[scan_p] = _scan_jvp


def _scan_vmap(axis_size, vals_in, dims_in, *, jaxpr, num_consts, num_carry, length, reverse):
  jaxpr = state.discharged_inner(jaxpr)   # Refs made in the body: values
  nc, ncar = num_consts, num_carry
  bat = [d is not not_mapped for d in dims_in]
  consts_b, carry_b, xs_b = bat[:nc], bat[nc:nc + ncar], bat[nc + ncar:]
  n_ys = len(jaxpr.out_avals) - ncar
  carry_b = carry_fixpoint(carry_b, lambda c: batch_jaxpr(
      jaxpr.jaxpr, axis_size, tuple(consts_b + c + xs_b), tuple(c + [False] * n_ys))[2][:ncar])
  j, jc, out_b = batch_jaxpr(jaxpr.jaxpr, axis_size, tuple(consts_b + carry_b + xs_b),
                             tuple(carry_b + [False] * n_ys))
  consts = [at_axis0(axis_size, x, d) for x, d in zip(vals_in[:nc], dims_in[:nc])]
  carry = [move_batch_axis(axis_size, d, 0, x) if b else x
           for x, d, b in zip(vals_in[nc:nc + ncar], dims_in[nc:nc + ncar], carry_b)]
  # xs keep the scanned axis first: their batch axis goes second.
  xs = [x if d is not_mapped else move_batch_axis(axis_size, d, 1, x)
        for x, d in zip(vals_in[nc + ncar:], dims_in[nc + ncar:])]
  ops = [*jc, *consts, *carry, *xs]
  outs = scan_p.bind(*ops, jaxpr=as_closed(j), num_consts=len(jc) + nc, num_carry=ncar,
                     length=length, reverse=reverse)
  return outs, ([0 if b else not_mapped for b in out_b[:ncar]]
                + [1 if b else not_mapped for b in out_b[ncar:]])


batching.vmap_rules[scan_p] = _scan_vmap
batching.axis_vmap_rules[scan_p] = named_axis_rule(_scan_vmap)   # Many devices


def _scan_lowering(ctx, *args, jaxpr, num_consts, num_carry, length, reverse):
  """A scan is a while loop over (i, carry, ys): each iteration slices x = xs[i]
  (dynamic_slice), runs the body, and writes y into ys[i] (dynamic_update_slice)."""
  nc, ncar = num_consts, num_carry
  consts, init, xs = args[:nc], args[nc:nc + ncar], args[nc + ncar:]
  avals_in = ctx.avals_in
  carry_avals, xs_avals = avals_in[nc:nc + ncar], avals_in[nc + ncar:]
  ys_avals = ctx.avals_out[ncar:]
  if length == 0:   # no iteration, and a body slicing empty xs would not compile
    return [*init, *(ctx.constant(np.zeros(a.shape, a.dtype), a.dtype) for a in ys_avals)]
  i32 = ShapedArray((), np.int32)
  zero = ctx.constant(0, np.int32)
  ys_init = [ctx.constant(np.zeros(a.shape, a.dtype), a.dtype) for a in ys_avals]
  # Ordered effects in the body: the token is carried too, after i.
  ordered = is_ordered(jaxpr.effects)
  tokens = [ctx.current_token()] if ordered else []
  state_avals = [i32, *[lowering.abstract_token] * ordered, *carry_avals, *ys_avals]
  n = len(state_avals)
  name = ctx.fresh()
  names = [f"{name}#{k}" for k in range(n)] if n > 1 else [name]
  types = ", ".join(mlir_type(a) for a in state_avals)

  def fresh_args():
    return [ctx.fresh().replace("%", "%iter") for _ in state_avals]

  def head(block_args):
    return "^bb0(" + ", ".join(f"{a}: {mlir_type(v)}" for a, v in zip(block_args, state_avals)) + "):"

  ind = "      "
  # cond region: i < length
  cargs = fresh_args()
  sub = ctx.sub_context()
  lim = sub.constant(length, np.int32)
  t = mlir_type(i32)
  pred = sub.emit(f"stablehlo.compare LT, {cargs[0]}, {lim}, SIGNED : ({t}, {t}) -> tensor<i1>")
  cond_r = ("{\n    " + head(cargs) + "\n" + "\n".join(ind + l for l in sub.lines)
            + "\n" + return_op([pred], [ShapedArray((), np.bool_)]) + "\n    }")
  # body region
  bargs = fresh_args()
  i, token, state = bargs[0], bargs[1:1 + ordered], bargs[1 + ordered:]
  carry, ys = state[:ncar], state[ncar:]
  sub = ctx.sub_context(*token)
  if reverse:   # index length - 1 - i
    last = sub.constant(length - 1, np.int32)
    idx = sub.emit(f"stablehlo.subtract {last}, {i} : {t}")
  else:
    idx = i
  zero_in = sub.constant(0, np.int32)
  x_vals = []
  for x, a in zip(xs, xs_avals):
    starts = ", ".join([idx] + [zero_in] * (len(a.shape) - 1))
    sl = ShapedArray((1, *a.shape[1:]), a.dtype)
    s = sub.emit(f"stablehlo.dynamic_slice {x}, {starts}, sizes = {list(sl.shape)} : "
                 f"({mlir_type(a)}, {', '.join([t] * len(a.shape))}) -> {mlir_type(sl)}")
    el = ShapedArray(a.shape[1:], a.dtype)
    x_vals.append(sub.emit(f"stablehlo.reshape {s} : ({mlir_type(sl)}) -> {mlir_type(el)}"))
  outs = lowering.lower_jaxpr_body(sub, jaxpr.jaxpr,
                                   dict(zip(jaxpr.jaxpr.invars, [*consts, *carry, *x_vals])))
  new_carry, new_y = outs[:ncar], outs[ncar:]
  new_ys = []
  for buf, y, a in zip(ys, new_y, ys_avals):
    el = ShapedArray(a.shape[1:], a.dtype)
    up = ShapedArray((1, *a.shape[1:]), a.dtype)
    r = sub.emit(f"stablehlo.reshape {y} : ({mlir_type(el)}) -> {mlir_type(up)}")
    starts = ", ".join([idx] + [zero_in] * (len(a.shape) - 1))
    new_ys.append(sub.emit(
        f"stablehlo.dynamic_update_slice {buf}, {r}, {starts} : ({mlir_type(a)}, "
        f"{mlir_type(up)}, {', '.join([t] * len(a.shape))}) -> {mlir_type(a)}"))
  one = sub.constant(1, np.int32)
  i_next = sub.emit(f"stablehlo.add {i}, {one} : {t}")
  body_r = ("{\n    " + head(bargs) + "\n"
            + "\n".join(ind + l.replace("\n", "\n" + ind) for l in sub.lines) + "\n"
            + return_op([i_next, *[sub.token] * ordered, *new_carry, *new_ys], state_avals)
            + "\n    }")
  lhs = f"{name}:{n}" if n > 1 else name
  ctx.emit(f'{lhs} = "stablehlo.while"({", ".join([zero, *tokens, *init, *ys_init])}) '
           f"({cond_r}, {body_r}) : ({types}) -> ({types})", result=False)
  if ordered:
    ctx.token = names[1]
  return names[1 + ordered:]


lowering.lowering_rules[scan_p] = _scan_lowering


# --- scan: partial evaluation and transposition (grad) ------------------------------------------

def _scan_split(jaxpr: Jaxpr, nc, ncar, unknowns):
  """Split a scan body. Known scan: known consts, carry and xs -> known carry,
  known ys and per-iteration residuals (as extra ys). Unknown scan: residuals
  that are known consts are passed as consts, the rest are scanned over."""
  consts_uk, carry_uk, xs_uk = unknowns[:nc], list(unknowns[nc:nc + ncar]), unknowns[nc + ncar:]
  n_ys = len(jaxpr.outvars) - ncar
  carry_uk = carry_fixpoint(carry_uk, lambda c: pe.partial_eval_jaxpr(
      jaxpr, consts_uk + c + xs_uk, c + [False] * n_ys)[2][:ncar])
  uk = consts_uk + carry_uk + xs_uk
  j1, j2, out_uk, nr = pe.partial_eval_jaxpr(jaxpr, uk, carry_uk + [False] * n_ys)
  known_consts = [v for v, u in zip(jaxpr.invars[:nc], consts_uk) if not u]
  known_xs = [v for v, u in zip(jaxpr.invars[nc + ncar:], xs_uk) if not u]
  n_known_out = len(out_uk) - sum(out_uk)
  res = j1.outvars[n_known_out:]
  is_const_res = [type(r) is Var and r in known_consts for r in res]
  # Known body: drop the loop-invariant residuals (they are consts, passed as
  # is) and the residuals that are known xs (already stacked: passed as is).
  xs_res_idx = [known_xs.index(r) if type(r) is Var and r in known_xs else None
                for r, c in zip(res, is_const_res) if not c]
  j1 = Jaxpr([], j1.invars, j1.eqns, j1.outvars[:n_known_out] + [
      r for r, c in zip(res, is_const_res) if not c and not (type(r) is Var and r in known_xs)])
  res2 = j2.invars[:nr]
  ins2 = j2.invars[nr:]
  n_uk_consts, n_uk_carry = sum(consts_uk), sum(carry_uk)
  j2 = Jaxpr([], [r for r, c in zip(res2, is_const_res) if c] + ins2[:n_uk_consts]
             + ins2[n_uk_consts:n_uk_consts + n_uk_carry]
             + [r for r, c in zip(res2, is_const_res) if not c]
             + ins2[n_uk_consts + n_uk_carry:], j2.eqns, j2.outvars)
  const_res_idx = [known_consts.index(r) for r, c in zip(res, is_const_res) if c]
  stacked_avals = [r.aval for r, c in zip(res, is_const_res) if not c]
  return j1, j2, carry_uk, out_uk, const_res_idx, stacked_avals, xs_res_idx


def _stacked_residuals(computed, known_xs, xs_res_idx) -> list:
  """The unknown scan's per-iteration residuals: each one the known scan
  computed, or a known xs operand (`xs_res_idx`: its index, else None)."""
  computed = iter(computed)
  return [next(computed) if i is None else known_xs[i] for i in xs_res_idx]


def _scan_params(j, nconsts, ncarry, length, reverse):
  return dict(jaxpr=as_closed(j), num_consts=nconsts, num_carry=ncarry, length=length,
              reverse=reverse)


def _scan_partial_eval_jaxpr(unks_in, eqn):
  eqn = eqn._replace(params={**eqn.params, "jaxpr": state.discharged_inner(eqn.params["jaxpr"])})
  p = eqn.params
  nc, ncar, length, reverse = p["num_consts"], p["num_carry"], p["length"], p["reverse"]
  j1, j2, carry_uk, out_uk, const_res_idx, stacked_avals, xs_res_idx = _scan_split(
      p["jaxpr"].jaxpr, nc, ncar, list(unks_in))
  uk = list(unks_in[:nc]) + carry_uk + list(unks_in[nc + ncar:])
  ins = eqn.inputs
  ins1 = [x for x, u in zip(ins, uk) if not u]
  nkc, nkcar = nc - sum(unks_in[:nc]), ncar - sum(carry_uk)
  computed = [Var(ShapedArray((length, *a.shape), a.dtype, a.weak_type))
              for a, i in zip(stacked_avals, xs_res_idx) if i is None]
  known_xs = [x for x, u in zip(ins[nc + ncar:], unks_in[nc + ncar:]) if not u]
  stacked = _stacked_residuals(computed, known_xs, xs_res_idx)
  outs1 = [v for v, u in zip(eqn.out_binders, out_uk) if not u]
  eqn1 = JaxprEqn(scan_p, ins1, _scan_params(j1, nkc, nkcar, length, reverse),
                  outs1 + computed)
  known_consts = [x for x, u in zip(ins[:nc], unks_in[:nc]) if not u]
  const_res = [known_consts[i] for i in const_res_idx]
  uk_consts = [x for x, u in zip(ins[:nc], unks_in[:nc]) if u]
  uk_carry = [x for x, u in zip(ins[nc:nc + ncar], carry_uk) if u]
  uk_xs = [x for x, u in zip(ins[nc + ncar:], unks_in[nc + ncar:]) if u]
  ins2 = [*const_res, *uk_consts, *uk_carry, *stacked, *uk_xs]
  outs2 = [v for v, u in zip(eqn.out_binders, out_uk) if u]
  eqn2 = JaxprEqn(scan_p, ins2, _scan_params(j2, len(const_res) + len(uk_consts), len(uk_carry),
                                             length, reverse), outs2)
  # Known carries forced unknown enter the unknown scan as residuals too.
  res = [x for x in stacked + const_res + uk_carry if type(x) is Var]
  return eqn1, eqn2, out_uk, res


pe.partial_eval_jaxpr_rules[scan_p] = _scan_partial_eval_jaxpr


def _scan_partial_eval(trace, tracers, **params):   # from the rule above
  return pe.partial_eval_by_jaxpr_rule(trace, scan_p, tracers, params)


pe.partial_eval_rules[scan_p] = _scan_partial_eval


def _scan_transpose(cts, *args, jaxpr, num_consts, num_carry, length, reverse):
  """Run the linear scan backwards. Consts that are residuals stay consts;
  linear consts accumulate their cotangent in the carry; the carry's
  cotangent is the carry; residual xs and the ys' cotangents are scanned over
  in reverse, producing the linear xs' cotangents. Every carry is linear."""
  nc, ncar = num_consts, num_carry
  consts, carry, xs = args[:nc], args[nc:nc + ncar], args[nc + ncar:]
  undef = ad.is_undefined_primal
  c_lin = [undef(c) for c in consts]
  x_lin = [undef(x) for x in xs]
  res_consts = [c for c in consts if not undef(c)]
  res_xs = [x for x in xs if not undef(x)]
  body = jaxpr.jaxpr
  avals = body.in_avals
  c_avals, car_avals, x_avals = avals[:nc], avals[nc:nc + ncar], avals[nc + ncar:]
  y_avals = body.out_avals[ncar:]
  lin_c_avals = [a for a, l in zip(c_avals, c_lin) if l]

  def body_t(*a):
    it = iter(a)
    rc = [next(it) for _ in res_consts]
    acc = [next(it) for _ in lin_c_avals]
    ct_carry = [next(it) for _ in car_avals]
    rx = [next(it) for _ in res_xs]
    ct_y = [next(it) for _ in y_avals]
    rc_it, rx_it = iter(rc), iter(rx)
    primals = ([ad.UndefPrimal(av) if l else next(rc_it) for av, l in zip(c_avals, c_lin)]
               + [ad.UndefPrimal(av) for av in car_avals]
               + [ad.UndefPrimal(av) if l else next(rx_it) for av, l in zip(x_avals, x_lin)])
    cts_in = ad.backward_pass(body, primals, [*ct_carry, *ct_y])
    cts_in = [instantiate_zeros(c) for c in cts_in]
    nlc = len(lin_c_avals)
    ct_consts, ct_carry_new, ct_x = cts_in[:nlc], cts_in[nlc:nlc + ncar], cts_in[nlc + ncar:]
    return ([lax.add(a, b) for a, b in zip(acc, ct_consts)] + ct_carry_new + ct_x)

  res_c_avals = [raise_to_shaped(get_aval(c)) for c in res_consts]
  res_x_avals = [_unstacked(raise_to_shaped(get_aval(x))) for x in res_xs]
  tj, tc = trace_flat(body_t, [*res_c_avals, *lin_c_avals, *car_avals, *res_x_avals, *y_avals])
  ct_carry = [instantiate_zeros(c) for c in cts[:ncar]]
  ct_ys = [instantiate_zeros(c) for c in cts[ncar:]]
  acc0 = [np.zeros(a.shape, a.dtype) for a in lin_c_avals]
  ops = [*tc, *res_consts, *acc0, *ct_carry, *res_xs, *ct_ys]
  outs = scan_p.bind(*ops, **_scan_params(tj, len(tc) + len(res_consts),
                                          len(acc0) + ncar, length, not reverse))
  nlc = len(acc0)
  ct_consts, ct_init, ct_xs = iter(outs[:nlc]), outs[nlc:nlc + ncar], iter(outs[nlc + ncar:])
  return ([next(ct_consts) if l else None for l in c_lin]
          + [ct if undef(c) else None for ct, c in zip(ct_init, carry)]
          + [next(ct_xs) if l else None for l in x_lin])


ad.transpose_rules[scan_p] = _scan_transpose


# --- scan: discharge (a Ref its body closes over becomes a carry) -------------------------------

def _discharge_scan(eqn, vals, env):
  p = eqn.params
  nc, ncar = p["num_consts"], p["num_carry"]
  if any(isinstance(x.aval, state.AbstractRef) for x in eqn.inputs[nc:]):
    raise NotImplementedError("scan: a Ref may be closed over, not carried or scanned over")
  refs = state.ref_slots(eqn, range(nc))
  consts_in = eqn.inputs[:nc]

  def body(carried, xs):
    ref_vals, carry = carried
    args = state.substitute(consts_in, vals[:nc], refs, ref_vals) + list(carry) + list(xs)
    outs, finals = state.run_discharged(p["jaxpr"], args, eqn.inputs)
    return (state.updated(consts_in, refs, ref_vals, finals), outs[:ncar]), outs[ncar:]
  (ref_vals, carry), ys = scan(body, ([env[r] for r in refs], vals[nc:nc + ncar]),
                               vals[nc + ncar:], length=p["length"], reverse=p["reverse"])
  env.update(zip(refs, ref_vals))
  return list(carry) + list(ys)


state.discharge_rules[scan_p] = _discharge_scan


# --- vmap of dynamic slicing at batched indices: a scan over the batch ---------------------

def _loop_over_batch(axis_size, f, vals_in, dims_in):
  """Apply `f` to one batch element at a time, in a `scan`. Slices at
  different indices are no single slice (JAX uses `gather`); a loop is the
  simplest correct answer."""
  mapped = [d is not not_mapped for d in dims_in]
  xs = [move_batch_axis(axis_size, d, 0, v) for v, d, m in zip(vals_in, dims_in, mapped) if m]

  def body(carry, x_slices):
    it = iter(x_slices)
    return carry, f(*(next(it) if m else v for v, m in zip(vals_in, mapped)))
  _, out = scan(body, (), xs)
  return out, 0


def _dynamic_slice_rule(axis_size, vals_in, dims_in, *, slice_sizes):
  (x, *starts), (x_bdim, *start_dims) = vals_in, dims_in
  if any(d is not not_mapped for d in start_dims):
    return _loop_over_batch(axis_size, lambda x, *s: lax.dynamic_slice_p.bind(
        x, *s, slice_sizes=slice_sizes), vals_in, dims_in)
  x = move_batch_axis(axis_size, x_bdim, 0, x)
  return lax.dynamic_slice_p.bind(x, np.int64(0), *starts,
                                  slice_sizes=(axis_size, *slice_sizes)), 0


def _dynamic_update_slice_rule(axis_size, vals_in, dims_in):
  (x, update, *starts), (x_bdim, u_bdim, *start_dims) = vals_in, dims_in
  if any(d is not not_mapped for d in start_dims):
    return _loop_over_batch(axis_size, lax.dynamic_update_slice_p.bind, vals_in, dims_in)
  x = move_batch_axis(axis_size, x_bdim, 0, x)
  update = move_batch_axis(axis_size, u_bdim, 0, update)
  return lax.dynamic_update_slice_p.bind(x, update, np.int64(0), *starts), 0


batching.vmap_rules[lax.dynamic_slice_p] = _dynamic_slice_rule
batching.vmap_rules[lax.dynamic_update_slice_p] = _dynamic_update_slice_rule
