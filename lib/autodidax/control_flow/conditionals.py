"""cond and switch: one equation holding a jaxpr per branch."""
from __future__ import annotations

import numpy as np

from .. import ad, batching, effects, lowering, state
from .. import primitives as lax
from ..flop_count import flops_call_rules
from .. import partial_eval as pe
from ..ad import Zero, instantiate_zeros, jvp_jaxpr, transpose_jaxpr
from ..api_util import shaped_abstractify
from ..batching import batch_jaxpr, named_axis_rule, not_mapped
from ..core import (Primitive, abstract_eval_rules, get_aval, impl_rules,
                    raise_to_shaped)
from ..sharding_rules import keep_body_types
from ..effects import is_ordered
from ..jaxpr import Jaxpr, JaxprEqn, Var, eval_jaxpr
from ..lowering import mlir_type
from ..tree_util import tree_flatten, tree_unflatten
from ..primitives import clamp, select_n
from .common import (as_closed, at_axis0, avals_str, is_float, join_consts, layout,
                     lower_region, nonzero_mask, result_names, return_op, same_type,
                     trace_flat, trace_tree, zeros_of)


# --- cond and switch ---------------------------------------------------------------------------

cond_p = Primitive("cond", multiple_results=True)


def switch(index, branches, *operands):
  """Apply `branches[index]` to `operands`; `index` is clamped into range."""
  branches = list(branches)
  if not branches:
    raise ValueError("switch: needs at least one branch")
  aval = get_aval(index)
  if aval.shape != ():
    raise TypeError(f"switch: the index must be a scalar, got {aval.str_short()}")
  if aval.dtype.kind not in "iu":
    raise TypeError(f"switch: the index must be an integer, got {aval.str_short()}")
  index = lax.convert_element_type(index, np.int32)
  index = clamp(np.int32(0), index, np.int32(len(branches) - 1))
  if len(branches) == 1:
    return branches[0](*operands)
  return _bind_cond(index, branches, operands, "switch")


def cond(pred, true_fun, false_fun, *operands):
  """`true_fun(*operands) if pred else false_fun(*operands)`, staged: both
  branches are traced, one runs. The predicate is a scalar bool (or number)."""
  if not callable(true_fun) or not callable(false_fun):
    raise TypeError("cond: true_fun and false_fun must be callable: "
                    "cond(pred, true_fun, false_fun, *operands)")
  aval = get_aval(pred)
  if aval.shape != ():
    raise TypeError(f"cond: the predicate must be a scalar (shape ()), got "
                    f"{aval.str_short()}. For an elementwise choice use select_n "
                    "or anp.where-style masking; under vmap, a batched scalar "
                    "predicate is fine.")
  if aval.dtype != np.bool_ and aval.dtype.kind not in "iuf":
    raise TypeError(f"cond: the predicate must be bool or a number, got {aval.str_short()}")
  if isinstance(pred, (bool, int, float, np.generic, np.ndarray)):
    index = np.int32(bool(pred))   # known now: a literal index, as in JAX
  else:
    if aval.dtype != np.bool_:
      pred = lax.convert_element_type(pred, np.bool_)   # nonzero is true
    index = lax.convert_element_type(pred, np.int32)
  return _bind_cond(index, [false_fun, true_fun], operands, "cond",
                    names=["false_fun", "true_fun"])


def _bind_cond(index, branches, operands, what, names=None):
  # Messages name the branches in the order the user wrote them.
  names = names or [f"branch {i}" for i in range(len(branches))]
  order = list(range(len(branches)))
  if what == "cond":
    order.reverse()   # branches are [false_fun, true_fun]
  ops_flat, in_tree = tree_flatten(tuple(operands))
  in_avals = [shaped_abstractify(x) for x in ops_flat]
  traced = [trace_tree(lambda *a, f=f: f(*a), in_tree, in_avals) for f in branches]
  out_trees = [t[2] for t in traced]
  first = order[0]
  if any(t != out_trees[first] for t in out_trees):
    i = next(i for i in order if out_trees[i] != out_trees[first])
    raise TypeError(f"{what}: branches must return the same structure, but {names[first]} "
                    f"returns {out_trees[first]} and {names[i]} returns {out_trees[i]}")
  # Shapes and dtypes must agree, as in JAX; only weak types may differ.
  _check_branch_types([t[0].out_avals for t in traced], what, names, order)
  jaxprs, consts = join_consts([t[:2] for t in traced])
  if (isinstance(index, batching.BatchTracer) and index.batch_dim is not not_mapped
      and any(type(c) is state.Ref for c in consts)):   # JAX's words, and its kind of error
    raise NotImplementedError(
        f"State effect not supported in vmap-of-cond: the {what}'s predicate is batched and "
        "its branches use a Ref, which each element of the batch would change its own way. "
        "Compute both branches' values and pick with where (select_n) instead.")
  outs = cond_p.bind(index, *consts, *ops_flat, branches=tuple(as_closed(j) for j in jaxprs))
  return tree_unflatten(out_trees[0], outs)


def _check_branch_types(outs_avals: list, what: str, names, order):
  for k, avals in enumerate(zip(*outs_avals)):
    if any(not same_type(a, avals[0]) for a in avals):
      types = "; ".join(f"{names[i]}: {avals_str(outs_avals[i])}" for i in order)
      raise TypeError(f"{what}: every branch must return the same types, but output {k} "
                      f"differs ({types}). Make the branches agree in shape and dtype "
                      "(a Python scalar is a float64 or int64: convert it, e.g. "
                      "x.dtype.type(0.0)).")
    if len({layout(a) for a in avals} - {None}) > 1:   # as JAX: shardings too
      types = "; ".join(f"{names[i]}: {avals_str(outs_avals[i])}" for i in order)
      raise TypeError(f"{what}: every branch must return the same types, but output {k} "
                      f"is laid out differently ({types}). Reshard it in one branch "
                      "(sharding.reshard) to the other's layout.")


def _cond_impl(index, *args, branches, run=eval_jaxpr):
  i = int(np.clip(np.asarray(index), 0, len(branches) - 1))
  return run(branches[i].jaxpr, branches[i].consts, *args)


def _cond_abstract_eval(index, *args, branches):
  if index.shape != () or index.dtype != np.int32:
    raise TypeError(f"cond: the branch index must be an int32 scalar, got {index.str_short()}")
  for i, br in enumerate(branches):
    want = br.in_avals
    if len(want) != len(args) or any(not same_type(a, w) for a, w in zip(args, want)):
      raise TypeError(f"cond: branch {i} takes {avals_str(want)} but the operands are "
                      f"{avals_str(args)}")
    if len(br.out_avals) != len(branches[0].out_avals) or any(
        not same_type(a, b) for a, b in zip(br.out_avals, branches[0].out_avals)):
      raise TypeError(f"cond: branch {i} returns {avals_str(br.out_avals)} but branch 0 "
                      f"returns {avals_str(branches[0].out_avals)}")
  # branch 0's types, weak types included, as JAX's cond
  return [raise_to_shaped(a) for a in branches[0].out_avals]


impl_rules[cond_p] = _cond_impl
flops_call_rules[cond_p] = _cond_impl   # with a `run` that counts: the branch taken
abstract_eval_rules[cond_p] = _cond_abstract_eval
keep_body_types(cond_p)   # its results' types, shardings included, are its body's


def _cond_jvp(primals, tangents, *, branches):
  branches = tuple(map(state.discharged_inner, branches))   # Refs made inside: values
  index, *ops = primals
  ops_nz = [nz and is_float(get_aval(x)) for nz, x in zip(nonzero_mask(tangents[1:]), ops)]
  out_nz = [False] * len(branches[0].out_avals)
  for br in branches:   # an output's tangent is nonzero if any branch makes it so
    _, _, nz = jvp_jaxpr(br.jaxpr, tuple(ops_nz), tuple(out_nz))
    out_nz = [a or b for a, b in zip(out_nz, nz)]
  traced = [jvp_jaxpr(br.jaxpr, tuple(ops_nz), tuple(out_nz))[:2] for br in branches]
  jaxprs, consts = join_consts(traced)
  dots = [instantiate_zeros(t) for t, nz in zip(tangents[1:], ops_nz) if nz]
  outs = cond_p.bind(index, *consts, *ops, *dots, branches=tuple(as_closed(j) for j in jaxprs))
  n = len(out_nz)
  p_out, t_out = outs[:n], iter(outs[n:])
  return p_out, [next(t_out) if nz else Zero.from_value(p) for p, nz in zip(p_out, out_nz)]


ad.jvp_rules[cond_p] = _cond_jvp


def _cond_vmap(axis_size, vals_in, dims_in, *, branches):
  branches = tuple(map(state.discharged_inner, branches))   # Refs made inside: values
  index, *ops = vals_in
  idim, *dims = dims_in
  ops = [at_axis0(axis_size, x, d) for x, d in zip(ops, dims)]
  in_b = tuple(d is not not_mapped for d in dims)
  n_out = len(branches[0].out_avals)
  if idim is not_mapped:
    out_b = [False] * n_out
    for br in branches:
      out_b = [a or b for a, b in zip(out_b, batch_jaxpr(br.jaxpr, axis_size, in_b, tuple(out_b))[2])]
    traced = [batch_jaxpr(br.jaxpr, axis_size, in_b, tuple(out_b))[:2] for br in branches]
    jaxprs, consts = join_consts(traced)
    outs = cond_p.bind(index, *consts, *ops, branches=tuple(as_closed(j) for j in jaxprs))
    return outs, [0 if b else not_mapped for b in out_b]
  # A batched predicate: each batch element may take a different branch.
  index = clamp(np.int32(0), at_axis0(axis_size, index, idim), np.int32(len(branches) - 1))
  outs = _cond_vmap_batched_index(axis_size, index, ops, in_b, branches)
  return outs, [0] * n_out


def _cond_vmap_batched_index(axis_size, index, ops, in_batched, branches):
  """Every branch runs on the whole batch, and select_n picks per element.
  `index`: int32[axis_size], clamped; `ops` batched at axis 0 where `in_batched`.
  Each branch sees its inputs through `stop_gradient` where it isn't taken, so
  a branch not taken (sqrt of a negative) sends no NaN back in reverse mode."""
  n_out = len(branches[0].out_avals)
  force = (True,) * n_out
  ops = [x if b else batching.move_batch_axis(axis_size, not_mapped, 0, x)   # all batched
         for x, b in zip(ops, in_batched)]
  results = []
  for i, br in enumerate(branches):
    taken = lax.eq(index, np.int32(i))
    j, consts, _ = batch_jaxpr(br.jaxpr, axis_size, (True,) * len(ops), force)
    results.append(eval_jaxpr(j, [], *consts, *[_where_taken(taken, x) for x in ops]))
  outs = []
  for k in range(n_out):
    cases = [r[k] for r in results]
    shape = np.shape(cases[0])
    which = index if len(shape) == 1 else lax.broadcast(index, shape, range(1, len(shape)))
    outs.append(select_n(which, *cases))
  return outs


def _where_taken(taken, x):
  """`x` where the branch is taken, `stop_gradient(x)` elsewhere (floats only)."""
  aval = get_aval(x)
  if not is_float(aval):
    return x
  shape = aval.shape
  which = taken if len(shape) == 1 else lax.broadcast(taken, shape, range(1, len(shape)))
  return select_n(which, lax.stop_gradient(x), x)


batching.vmap_rules[cond_p] = _cond_vmap
batching.axis_vmap_rules[cond_p] = named_axis_rule(_cond_vmap)   # Many devices


def _cond_lowering(ctx, index, *args, branches):
  avals_out = ctx.avals_out
  # Ordered effects in a branch: each takes the token and returns the next.
  token = ctx.current_token() if any(is_ordered(b.effects) for b in branches) else None
  if token is not None:
    avals_out = [lowering.abstract_token, *avals_out]
  lhs, names = result_names(ctx, len(avals_out))
  regions = []
  for br in branches:
    lines, outs = lower_region(ctx, br.jaxpr, list(args), token=token)
    regions.append("{\n" + "\n".join(lines + [return_op(outs, avals_out)]) + "\n    }")
  out_types = ", ".join(mlir_type(a) for a in avals_out)
  ctx.emit(f'{lhs} = "stablehlo.case"({index}) ({", ".join(regions)}) : '
           f"(tensor<i32>) -> ({out_types})", result=False)
  if token is not None:
    ctx.token, names = names[0], names[1:]
  return names


lowering.lowering_rules[cond_p] = _cond_lowering


def _cond_split(branches, unknowns: list):
  """Split each branch into a known part (known operands -> known outputs and
  residuals) and an unknown part (residuals, unknown operands -> unknown
  outputs). All branches share one residual list, where the k-th residual of
  a type in each branch shares a slot (as JAX merges them); a branch fills
  the slots it doesn't use with zeros. Returns (known jaxprs, unknown
  jaxprs, out_unknowns, res avals)."""
  n_out = len(branches[0].out_avals)
  out_uk = [False] * n_out
  for br in branches:
    _, _, uk, _ = pe.partial_eval_jaxpr(br.jaxpr, unknowns, out_uk)
    out_uk = [a or b for a, b in zip(out_uk, uk)]
  splits = [pe.partial_eval_jaxpr(br.jaxpr, unknowns, out_uk) for br in branches]
  all_res, slots = _merge_residuals([[v.aval for v in j2.invars[:nr]]
                                     for _, j2, _, nr in splits])
  n_known_out = n_out - sum(out_uk)
  known, unknown = [], []
  for (j1, j2, _, nr), at in zip(splits, slots):
    def known_fun(*args, j1=j1, at=at):
      outs = eval_jaxpr(j1, [], *args)
      mine = dict(zip(at, outs[n_known_out:]))
      return outs[:n_known_out] + [mine[k] if k in mine else zeros_of(a)
                                   for k, a in enumerate(all_res)]
    kj, kc = trace_flat(known_fun, j1.in_avals)
    assert not kc
    known.append(kj)
    res_vars = [Var(a) for a in all_res]
    for k, v in zip(at, j2.invars[:nr]):
      res_vars[k] = v
    unknown.append(Jaxpr([], res_vars + j2.invars[nr:], j2.eqns, j2.outvars))
  return known, unknown, out_uk, all_res


def _merge_residuals(branch_avals: list) -> tuple[list, list]:
  """One residual list for all branches: the avals, and for each branch the
  slot of each of its residuals (its k-th of a type takes that type's k-th)."""
  all_avals, slot_of, slots = [], {}, []
  for avals in branch_avals:
    seen: dict = {}
    mine = []
    for a in avals:
      key = (a.shape, np.dtype(a.dtype), a.weak_type)
      tag = (key, seen.setdefault(key, 0))
      seen[key] += 1
      if tag not in slot_of:
        slot_of[tag] = len(all_avals)
        all_avals.append(a)
      mine.append(slot_of[tag])
    slots.append(mine)
  return all_avals, slots


def _cond_partial_eval_jaxpr(unks_in, eqn):
  eqn = eqn._replace(params={**eqn.params, "branches": tuple(
      state.discharged_inner(b) for b in eqn.params["branches"])})
  index, *ops = eqn.inputs
  branches = eqn.params["branches"]
  if unks_in[0]:
    return None, eqn, [True] * len(eqn.out_binders), [x for x in eqn.inputs if type(x) is Var]
  unknowns = unks_in[1:]
  known, unknown, out_uk, res_avals = _cond_split(branches, unknowns)
  ins1 = [x for x, uk in zip(ops, unknowns) if not uk]
  ins2 = [x for x, uk in zip(ops, unknowns) if uk]
  outs1 = [v for v, uk in zip(eqn.out_binders, out_uk) if not uk]
  outs2 = [v for v, uk in zip(eqn.out_binders, out_uk) if uk]
  # Typed as cond types its outputs, by branch 0 (whose slot may be a zero).
  residuals = [Var(raise_to_shaped(a)) for a in known[0].out_avals[len(outs1):]]
  eqn1 = JaxprEqn(cond_p, [index, *ins1], dict(branches=tuple(as_closed(j) for j in known)),
                  outs1 + residuals)
  eqn2 = JaxprEqn(cond_p, [index, *residuals, *ins2],
                  dict(branches=tuple(as_closed(j) for j in unknown)), outs2)
  res = residuals + ([index] if type(index) is Var else [])
  return eqn1, eqn2, out_uk, res


pe.partial_eval_jaxpr_rules[cond_p] = _cond_partial_eval_jaxpr


def _cond_forwarding(eqn1, eqn2):
  """The known cond's outputs that are one operand in every branch whose
  unknown part reads them (a branch that doesn't fills the slot with zeros)."""
  branches1, branches2 = eqn1.params["branches"], eqn2.params["branches"]
  forwarded = {}
  for k, v in enumerate(eqn1.out_binders):
    at = [i - 1 for i, x in enumerate(eqn2.inputs) if x is v]   # its operand slots in eqn2
    froms = set()
    for b1, b2 in zip(branches1, branches2):
      j1, j2 = b1.jaxpr, b2.jaxpr
      read = {x for e in j2.eqns for x in e.inputs} | set(j2.outvars)
      if not any(j2.invars[i] in read for i in at):
        continue
      out = j1.outvars[k]
      froms.add(j1.invars.index(out) if out in j1.invars else None)
    if len(froms) == 1 and None not in froms and at:
      forwarded[k] = 1 + froms.pop()   # after the index
  return forwarded


pe.residual_forwarding[cond_p] = _cond_forwarding


def _cond_partial_eval(trace, tracers, **params):   # from the rule above
  return pe.partial_eval_by_jaxpr_rule(trace, cond_p, tracers, params)


pe.partial_eval_rules[cond_p] = _cond_partial_eval


def _cond_transpose(cts, index, *ops, branches):
  if ad.is_undefined_primal(index):
    raise ValueError("cond is not linear in its branch index")
  undefined = tuple(ad.is_undefined_primal(x) for x in ops)
  traced = [transpose_jaxpr(br.jaxpr, undefined) for br in branches]
  jaxprs, consts = join_consts(traced)
  residuals = [x for x in ops if not ad.is_undefined_primal(x)]
  cts = [instantiate_zeros(ct) for ct in cts]
  outs = iter(cond_p.bind(index, *consts, *residuals, *cts,
                          branches=tuple(as_closed(j) for j in jaxprs)))
  return [None] + [next(outs) if u else None for u in undefined]


ad.transpose_rules[cond_p] = _cond_transpose


# --- cond: discharge (a Ref a branch reads or writes comes back from every branch) --------------

def _discharge_cond(eqn, vals, env):
  refs = state.ref_slots(eqn, range(1, len(eqn.inputs)))
  ins = eqn.inputs[1:]

  def branch(closed):
    def run(ref_vals, args):
      args = state.substitute(ins, args, refs, ref_vals)
      outs, finals = state.run_discharged(closed, args, ins)
      return outs, state.updated(ins, refs, ref_vals, finals)
    return run
  outs, ref_vals = switch(vals[0], [branch(b) for b in eqn.params["branches"]],
                          [env[r] for r in refs], vals[1:])
  env.update(zip(refs, ref_vals))
  return outs


state.discharge_rules[cond_p] = _discharge_cond
# A cond's branches take its inputs after the index.
effects.inner_jaxprs[cond_p] = lambda params: [(b, 1) for b in params["branches"]]
