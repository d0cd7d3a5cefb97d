"""Mutable references (`new_ref`, `Ref`) and their discharge into pure code.

A `Ref{f32[3]}` is a box whose contents a program reads and writes with three
primitives, each with an effect on it: `get` (`c:f32[3] <- b[...]`), `swap`
(`b[...] <- d`, returning the old contents) and `addupdate` (`b[...] += d`).
Discharge turns a jaxpr with Refs into a pure one: each Ref becomes the value
it holds, threaded from one equation to the next, and into loops as a carry.
Transformations and lowering then meet only pure code.
"""
from __future__ import annotations

import numpy as np

from . import core, effects
from . import primitives as lax
from .core import Primitive, ShapedArray, Tracer, abstract_eval_rules, impl_rules
from .jaxpr import ClosedJaxpr, Jaxpr, Lit, pp_eqn_rules, pp_params_rules


class AbstractRef:
  """The type of a Ref holding values of type `inner_aval`."""

  def __init__(self, inner_aval: ShapedArray):
    self.inner_aval = core.raise_to_shaped(inner_aval)

  shape = property(lambda self: self.inner_aval.shape)
  dtype = property(lambda self: self.inner_aval.dtype)
  ndim = property(lambda self: self.inner_aval.ndim)
  size = property(lambda self: self.inner_aval.size)
  weak_type = property(lambda self: self.inner_aval.weak_type)
  sharding = property(lambda self: self.inner_aval.sharding)
  vma = property(lambda self: self.inner_aval.vma)

  def str_short(self) -> str:
    return f"Ref{{{self.inner_aval.str_short()}}}"

  def update(self, **changes) -> "AbstractRef":
    return AbstractRef(self.inner_aval.update(**changes))

  def _bool(self, tracer):
    raise TypeError("a Ref has no truth value: read it first (ref[...])")

  def __eq__(self, other):
    return type(other) is AbstractRef and self.inner_aval == other.inner_aval

  def __hash__(self):
    return hash(("Ref", self.inner_aval))

  __repr__ = str_short


class Ref:
  """A Ref made outside staging: a box holding a value, an array eagerly or a
  tracer under jvp, vmap or grad. Its reads and writes are array operations
  on that value as the function runs: discharge, done by the interpreter.
  `level` is the interpreter that was running when it was made."""

  def __init__(self, val):
    self._val = val
    self.level = len(core.trace_stack) - 1

  @property
  def aval(self):
    return AbstractRef(core.raise_to_shaped(core.get_aval(self._val)))

  shape = property(lambda self: np.shape(self._val))
  dtype = property(lambda self: self.aval.dtype)

  def __getitem__(self, idx):
    return get(self, idx)

  def __setitem__(self, idx, val):
    swap(self, idx, val)

  def __repr__(self):
    return f"Ref({self._val!r})"


core.array_types.add(Ref)
core.aval_rules[Ref] = lambda r: r.aval


# --- Indexing: a static description, with traced integer indices as operands -------------

def _indexer(idx, shape):
  """`(entries, dynamic)`: per indexed dimension ("int", i), ("dyn",) or
  ("slice", start, stop); `dynamic` holds the traced integer indices."""
  idx = idx if isinstance(idx, tuple) else (idx,)
  if not idx or (len(idx) == 1 and idx[0] is Ellipsis):
    return (), []
  if any(i is Ellipsis for i in idx):
    raise IndexError("a Ref index may use `...` only on its own (ref[...])")
  if len(idx) > len(shape):
    raise IndexError(f"too many indices ({len(idx)}) for a Ref of rank {len(shape)}")
  entries, dynamic = [], []
  for i, d in zip(idx, shape):
    if isinstance(i, slice):
      start, stop, step = i.indices(d)
      if step != 1:
        raise IndexError("Ref slices must have step 1")
      entries.append(("slice", start, stop))
    elif isinstance(i, (int, np.integer)):
      if not -d <= i < d:
        raise IndexError(f"index {i} is out of bounds for a Ref axis of size {d}")
      entries.append(("int", int(i) % d))
    else:
      entries.append(("dyn",))
      dynamic.append(i)
  return tuple(entries), dynamic


def _starts_sizes(entries, dynamic, shape):
  dyn = iter(dynamic)
  starts, sizes = [], []
  for k, d in enumerate(shape):
    e = entries[k] if k < len(entries) else ("slice", 0, d)
    if e[0] == "slice":
      starts.append(e[1])
      sizes.append(e[2] - e[1])
    else:
      starts.append(e[1] if e[0] == "int" else next(dyn))
      sizes.append(1)
  squeezed = [k for k, e in enumerate(entries) if e[0] != "slice"]
  return starts, sizes, squeezed


def _indexed_shape(entries, shape):
  starts, sizes, squeezed = _starts_sizes(entries, [0] * len(entries), shape)
  return tuple(s for k, s in enumerate(sizes) if k not in squeezed)


def read(x, dynamic, entries):
  """`x[index]` on a plain array, with lax operations."""
  if not entries:
    return x
  starts, sizes, squeezed = _starts_sizes(entries, dynamic, np.shape(x))
  part = lax.dynamic_slice(x, starts, sizes)
  return lax.squeeze(part, squeezed) if squeezed else part


def write(x, dynamic, entries, val):
  """`x` with `x[index]` replaced by `val`: a new array."""
  if core.get_aval(val).dtype != np.dtype(x.dtype):
    val = lax.convert_element_type(val, np.dtype(x.dtype))
  if not entries:
    return val
  starts, sizes, _ = _starts_sizes(entries, dynamic, np.shape(x))
  return lax.dynamic_update_slice(x, lax.reshape(val, sizes), starts)


# --- The primitives --------------------------------------------------------------------------

new_ref_p = Primitive("new_ref")
get_p = Primitive("get")
swap_p = Primitive("swap")
addupdate_p = Primitive("addupdate", multiple_results=True)


def new_ref(x):
  """A Ref holding `x` (JAX's `jax.new_ref`). While a jaxpr is being staged
  (jit, make_jaxpr, a loop's body) it is a `new_ref` equation; otherwise a box."""
  if _staging([x]):
    return new_ref_p.bind(x)
  return Ref(np.array(x) if not isinstance(x, Tracer) else x)


def _staging(args) -> bool:
  from .partial_eval import DynamicJaxprTrace
  return core.find_top_trace(args).main.trace_type is DynamicJaxprTrace


def _boxed(ref) -> bool:
  """Whether to use the box `ref` directly (else its operations are staged,
  the box a constant of the jaxpr, as when a loop's body closes over it)."""
  if not isinstance(ref, Ref):
    return False
  staging = core.dynamic_trace is not None and core.dynamic_trace.level > ref.level
  if staging and isinstance(ref._val, Tracer):
    raise core.EscapedTracerError(
        "A Ref made under a transformation (jvp, vmap, grad) is used inside a staged body "
        "(a loop, cond, checkpoint or custom_jvp/custom_vjp function), which would carry "
        "the transformation's tracers out of the body. "
        "Wrap the function in jit: its Refs are then discharged into the loop's carry.")
  return not staging


def get(ref, idx=...):
  entries, dynamic = _indexer(idx, ref.shape)
  if _boxed(ref):
    return read(ref._val, dynamic, entries)
  return get_p.bind(ref, *dynamic, indexer=entries)


def _as_ref_dtype(ref, val):
  """A Python scalar takes the Ref's dtype, as it would an array's."""
  return np.asarray(val, ref.dtype) if type(val) in (bool, int, float) else val


def swap(ref, idx, val):
  val = _as_ref_dtype(ref, val)
  entries, dynamic = _indexer(idx, ref.shape)
  if _boxed(ref):
    return _swap_box(ref, val, dynamic, entries)
  return swap_p.bind(ref, val, *dynamic, indexer=entries)


def addupdate(ref, idx, val):
  val = _as_ref_dtype(ref, val)
  entries, dynamic = _indexer(idx, ref.shape)
  if _boxed(ref):
    _swap_box(ref, read(ref._val, dynamic, entries) + val, dynamic, entries)
  else:
    addupdate_p.bind(ref, val, *dynamic, indexer=entries)


def _swap_box(ref, val, dynamic, entries):
  want = _indexed_shape(entries, ref.shape)
  if tuple(np.shape(val)) != want:
    raise TypeError(f"can't write a value of shape {np.shape(val)} into Ref{want} "
                    "(the indexed part): shapes must match")
  for v in (val, *dynamic):
    if isinstance(v, Tracer) and v._trace.main.level > ref.level:
      raise core.EscapedTracerError(
          f"A value of an inner transformation ({v}) is written into a Ref made outside "
          "it: it would escape. Return it from the transformed function instead.")
  old = read(ref._val, dynamic, entries)
  ref._val = write(ref._val, dynamic, entries, val)
  return old


def _check_ref(ref, what):
  if not isinstance(ref, AbstractRef):
    raise TypeError(f"{what} needs a Ref, got a value of type {ref.str_short()}: make "
                    "one with new_ref(x)")


def _new_ref_abstract_eval(x):
  return AbstractRef(x)


def _get_abstract_eval(ref, *dynamic, indexer):
  _check_ref(ref, "get")
  return ShapedArray(_indexed_shape(indexer, ref.shape), ref.dtype, ref.weak_type)


def _swap_abstract_eval(ref, val, *dynamic, indexer):
  _check_ref(ref, "swap")
  shape = _indexed_shape(indexer, ref.shape)
  if tuple(val.shape) != shape:
    raise TypeError(f"can't write a value of shape {val.shape} into Ref{shape} "
                    "(the indexed part): shapes must match")
  return ShapedArray(shape, ref.dtype, ref.weak_type)


abstract_eval_rules[new_ref_p] = _new_ref_abstract_eval
abstract_eval_rules[get_p] = _get_abstract_eval
abstract_eval_rules[swap_p] = _swap_abstract_eval
abstract_eval_rules[addupdate_p] = lambda *a, indexer: (_swap_abstract_eval(*a, indexer=indexer)
                                                         and [])
effects.def_effects(new_ref_p, lambda x: {effects.internal_mutable_array_effect})
effects.def_effects(get_p, lambda *a, indexer: {effects.ReadEffect(0)})
effects.def_effects(swap_p, lambda *a, indexer: {effects.WriteEffect(0)})
effects.def_effects(addupdate_p, lambda *a, indexer: {effects.AccumEffect(0)})


def _impl_get(ref, *dynamic, indexer):
  return read(ref._val, dynamic, indexer)


def _impl_swap(ref, val, *dynamic, indexer):
  return _swap_box(ref, val, dynamic, indexer)


def _impl_addupdate(ref, val, *dynamic, indexer):
  _swap_box(ref, read(ref._val, dynamic, indexer) + val, dynamic, indexer)
  return []


impl_rules[new_ref_p] = lambda x: Ref(np.array(x))
impl_rules[get_p] = _impl_get
impl_rules[swap_p] = _impl_swap
impl_rules[addupdate_p] = _impl_addupdate


# --- Indexing a traced Ref, as `ref[...]`, `ref[i] = v`, `ref[...] += v` ----------------------

def _install_tracer_indexing():
  getitem, setitem = Tracer.__getitem__, getattr(Tracer, "__setitem__", None)

  def __getitem__(self, idx):
    return get(self, idx) if isinstance(self.aval, AbstractRef) else getitem(self, idx)

  def __setitem__(self, idx, val):
    if not isinstance(self.aval, AbstractRef):
      if setitem is None:
        raise TypeError("arrays are immutable: use x.at[idx].set(v), or a Ref")
      return setitem(self, idx, val)
    swap(self, idx, val)
  Tracer.__getitem__, Tracer.__setitem__ = __getitem__, __setitem__


_install_tracer_indexing()


# --- Printing as JAX does: `c:f32[3] <- b[...]`, `b[0] <- d`, `b[...] += d` ------------------

def _pp_index(entries, dyn_names):
  if not entries:
    return "..."
  dyn = iter(dyn_names)
  out = []
  for e in entries:
    out.append(str(e[1]) if e[0] == "int" else next(dyn) if e[0] == "dyn"
               else f"{e[1]}:{e[2]}")
  return ", ".join(out)


def pp_state_eqn(eqn, names, atom):
  """The line for a get, swap or addupdate equation (jaxpr.pp_eqn asks)."""
  ins = [atom(x) for x in eqn.inputs]
  p = eqn.primitive
  if p is get_p:
    ref, dyn = ins[0], ins[1:]
    v = eqn.out_binders[0]
    return f"{names[v]}:{v.aval.str_short()} <- {ref}[{_pp_index(eqn.params['indexer'], dyn)}]"
  ref, val, dyn = ins[0], ins[1], ins[2:]
  where = f"{ref}[{_pp_index(eqn.params['indexer'], dyn)}]"
  if p is addupdate_p:
    return f"{where} += {val}"
  v = eqn.out_binders[0]
  if v not in names.used:
    return f"{where} <- {val}"
  return f"{names[v]}:{v.aval.str_short()}, {where} <- {val}"


for _p in (get_p, swap_p, addupdate_p):
  pp_eqn_rules[_p] = pp_state_eqn
  # in pictures of the graph: where, as the printed line shows it (· a traced index)
  pp_params_rules[_p] = lambda params: [("at", f"[{_pp_index(params['indexer'], '·' * 9)}]")]
pp_params_rules[new_ref_p] = lambda params: []


# --- Discharge -------------------------------------------------------------------------------

def discharge_if_stateful(jaxpr: Jaxpr, name: str = "jit_fun",
                          ref_inputs_ok: bool = False) -> Jaxpr:
  """`jaxpr` itself if it has no Refs inside, else its discharged form. With
  `ref_inputs_ok` (a jit traced inside another's trace), a jaxpr that takes a
  Ref, closed over from outside, stays as it is: the outer jaxpr's discharge
  discharges it whole (`_discharge_call`)."""
  for x in jaxpr.outvars:
    if isinstance(x.aval, AbstractRef):   # JAX's error, and its kind
      raise ValueError(f"function {name} traced for jit returned a mutable array "
                       f"reference of type {x.aval.str_short()}, but mutable array "
                       "references cannot be returned.")
  if not any(isinstance(e, (effects.InternalMutableArrayEffect, effects.RefEffect))
             for e in jaxpr.effects):
    return jaxpr
  if any(isinstance(v.aval, AbstractRef) for v in jaxpr.constvars + jaxpr.invars):
    if ref_inputs_ok:
      return jaxpr
    raise TypeError("jit: a Ref made outside any jit can't be passed in or closed over "
                    "here; create it inside the function (new_ref) or pass its value "
                    "(ref[...])")
  new, consts = discharge_state(jaxpr)
  if consts:
    raise AssertionError("discharge made constants")
  return Jaxpr(new.invars[:len(jaxpr.constvars)], new.invars[len(jaxpr.constvars):],
               new.eqns, new.outvars)


def discharge_state(jaxpr: Jaxpr):
  """A pure jaxpr for `jaxpr` (constvars then invars become its inputs): each
  Ref input becomes a value input, and its final value an extra output,
  after the original outputs. Returns (jaxpr, consts)."""
  from .partial_eval import trace_to_jaxpr_dynamic
  ins = jaxpr.constvars + jaxpr.invars
  ref_ins = [i for i, v in enumerate(ins) if isinstance(v.aval, AbstractRef)]
  in_avals = [v.aval.inner_aval if isinstance(v.aval, AbstractRef) else v.aval for v in ins]

  def run(*args):
    env = dict(zip(ins, args))
    outs = _discharge_eqns(jaxpr, env)
    return outs + [env[ins[i]] for i in ref_ins]
  return trace_to_jaxpr_dynamic(run, in_avals)


def _discharge_eqns(jaxpr: Jaxpr, env: dict) -> list:
  """Evaluate `jaxpr`, with `env` mapping each Ref variable to its current
  value: reads and writes become array operations on those values."""
  def rd(x):
    return x.val if type(x) is Lit else env[x]

  for eqn in jaxpr.eqns:
    vals = [rd(x) for x in eqn.inputs]
    rule = discharge_rules.get(eqn.primitive)
    if rule is not None:
      outs = rule(eqn, vals, env)
    elif any(isinstance(x.aval, AbstractRef) for x in eqn.inputs):
      raise NotImplementedError(
          f"Discharge rule for '{eqn.primitive.name}' not implemented: it was passed a Ref")
    else:
      outs = eqn.primitive.bind(*vals, **eqn.params)
      outs = outs if eqn.primitive.multiple_results else [outs]
    for v, val in zip(eqn.out_binders, outs):
      env[v] = val
  return [rd(x) for x in jaxpr.outvars]


# `discharge_rules[prim](eqn, vals, env) -> outs`: vals hold the Refs'
# current values; a rule that writes a Ref stores its new value in env.
discharge_rules: dict = {}


def _discharge_new_ref(eqn, vals, env):
  return vals


def _discharge_get(eqn, vals, env):
  return [read(vals[0], vals[1:], eqn.params["indexer"])]


def _discharge_swap(eqn, vals, env):
  cur, val, dyn = vals[0], vals[1], vals[2:]
  idx = eqn.params["indexer"]
  env[eqn.inputs[0]] = write(cur, dyn, idx, val)
  return [read(cur, dyn, idx)]


def _discharge_addupdate(eqn, vals, env):
  cur, val, dyn = vals[0], vals[1], vals[2:]
  idx = eqn.params["indexer"]
  env[eqn.inputs[0]] = write(cur, dyn, idx, read(cur, dyn, idx) + val)
  return []


discharge_rules[new_ref_p] = _discharge_new_ref
discharge_rules[get_p] = _discharge_get
discharge_rules[swap_p] = _discharge_swap
discharge_rules[addupdate_p] = _discharge_addupdate


# --- Discharge through control flow: a Ref a body reads or writes becomes a carry ------------

def _run_discharged(closed, args, inputs):
  """Run a (closed) inner jaxpr discharged: `args` hold its Refs' values,
  `inputs` are the outer variables passed to its inputs (after its consts).
  Returns (outputs, the Refs' final values in input order)."""
  from .jaxpr import eval_jaxpr
  j, consts = getattr(closed, "jaxpr", closed), getattr(closed, "consts", [])
  new, new_consts = discharge_state(_dealias(j, [None] * len(j.constvars) + list(inputs)))
  outs = eval_jaxpr(new, new_consts, *consts, *args)
  return outs[:len(j.outvars)], outs[len(j.outvars):]


def _dealias(jaxpr: Jaxpr, inputs) -> Jaxpr:
  """`jaxpr` where a Ref input that is the same outer Ref (`inputs`) as an
  earlier one is read and written as that one: one Ref, not two copies."""
  ins, first, same = jaxpr.constvars + jaxpr.invars, {}, {}
  for v, x in zip(ins, inputs):
    if isinstance(v.aval, AbstractRef) and x is not None:
      same[v] = first.setdefault(x, v)
  same = {v: w for v, w in same.items() if v is not w}
  if not same:
    return jaxpr
  eqns = [e._replace(inputs=[x if type(x) is Lit else same.get(x, x) for x in e.inputs])
          for e in jaxpr.eqns]
  return Jaxpr(jaxpr.constvars, jaxpr.invars, eqns, jaxpr.outvars)


def _ref_slots(eqn, positions):
  """The distinct Ref variables among the inputs at `positions`."""
  refs = []
  for i in positions:
    x = eqn.inputs[i]
    if isinstance(x.aval, AbstractRef) and x not in refs:
      refs.append(x)
  return refs


def _substitute(inputs, vals, refs, ref_vals):
  return [ref_vals[refs.index(x)] if x in refs else v for x, v in zip(inputs, vals)]


def _updated(inputs, refs, ref_vals, finals):
  """Each Ref's value after a discharged body returned `finals` (one per
  Ref input, in order)."""
  ref_vals, seen = list(ref_vals), set()
  for x, f in zip([x for x in inputs if x in refs], finals):
    if x not in seen:   # a Ref passed twice: its first input holds its value
      ref_vals[refs.index(x)], seen = f, seen | {x}
  return ref_vals


def _discharge_scan(eqn, vals, env):
  from .control_flow import scan
  p = eqn.params
  nc, ncar = p["num_consts"], p["num_carry"]
  if any(isinstance(x.aval, AbstractRef) for x in eqn.inputs[nc:]):
    raise NotImplementedError("scan: a Ref may be closed over, not carried or scanned over")
  refs = _ref_slots(eqn, range(nc))
  consts_in = eqn.inputs[:nc]

  def body(state, xs):
    ref_vals, carry = state
    args = _substitute(consts_in, vals[:nc], refs, ref_vals) + list(carry) + list(xs)
    outs, finals = _run_discharged(p["jaxpr"], args, eqn.inputs)
    return (_updated(consts_in, refs, ref_vals, finals), outs[:ncar]), outs[ncar:]
  (ref_vals, carry), ys = scan(body, ([env[r] for r in refs], vals[nc:nc + ncar]),
                               vals[nc + ncar:], length=p["length"], reverse=p["reverse"])
  env.update(zip(refs, ref_vals))
  return list(carry) + list(ys)


def _discharge_while(eqn, vals, env):
  from .control_flow import while_loop
  p = eqn.params
  nc, nb = p["cond_nconsts"], p["body_nconsts"]
  if any(isinstance(x.aval, AbstractRef) for x in eqn.inputs[nc + nb:]):
    raise NotImplementedError("while_loop: a Ref may be closed over, not carried")
  refs = _ref_slots(eqn, range(nc + nb))
  cin, bin_ = eqn.inputs[:nc], eqn.inputs[nc:nc + nb]

  def cond_fun(state):
    ref_vals, carry = state
    outs, _ = _run_discharged(p["cond_jaxpr"],
                              _substitute(cin, vals[:nc], refs, ref_vals) + list(carry),
                              cin + eqn.inputs[nc + nb:])
    return outs[0]

  def body_fun(state):
    ref_vals, carry = state
    outs, finals = _run_discharged(
        p["body_jaxpr"], _substitute(bin_, vals[nc:nc + nb], refs, ref_vals) + list(carry),
        bin_ + eqn.inputs[nc + nb:])
    return _updated(bin_, refs, ref_vals, finals), outs
  ref_vals, carry = while_loop(cond_fun, body_fun, ([env[r] for r in refs], vals[nc + nb:]))
  env.update(zip(refs, ref_vals))
  return list(carry)


def _discharge_cond(eqn, vals, env):
  from .control_flow import switch
  refs = _ref_slots(eqn, range(1, len(eqn.inputs)))
  ins = eqn.inputs[1:]

  def branch(closed):
    def run(ref_vals, args):
      outs, finals = _run_discharged(closed, _substitute(ins, args, refs, ref_vals), ins)
      return outs, _updated(ins, refs, ref_vals, finals)
    return run
  outs, ref_vals = switch(vals[0], [branch(b) for b in eqn.params["branches"]],
                          [env[r] for r in refs], vals[1:])
  env.update(zip(refs, ref_vals))
  return outs


# --- Discharge through calls: a Ref a jit, checkpoint or shard_map body uses ----------------

def _discharge_call(eqn, vals, env):
  """The call again, its body discharged: each Ref it is passed goes in as
  its value, and its final value comes out after the call's outputs."""
  refs = _ref_slots(eqn, range(len(eqn.inputs)))
  body, consts = _discharged(_dealias(eqn.params["jaxpr"], eqn.inputs), eqn.primitive.name)
  params = call_params[eqn.primitive](eqn, body, len(consts), refs)
  outs = eqn.primitive.bind(*consts, *vals, **params)
  n = len(eqn.out_binders)
  env.update(zip(refs, _updated(eqn.inputs, refs, [None] * len(refs), outs[n:])))
  return outs[:n]


def _discharged(jaxpr: Jaxpr, what: str):
  new, consts = discharge_state(jaxpr)
  if consts:
    raise AssertionError(f"{what}: discharge made constants")
  return Jaxpr([], new.invars, new.eqns, new.outvars), consts


# `call_params[prim](eqn, body, num_new_consts, refs)`: the params of the
# call of `body`, which returns after its outputs the final value of each
# Ref input (a Ref passed twice, twice).
call_params: dict = {}


def _xla_call_params(eqn, body, n_consts, refs):
  if "mesh" in eqn.params:
    raise NotImplementedError("jit with shardings: a Ref can't cross into its body")
  return {**eqn.params, "jaxpr": body, "num_consts": eqn.params["num_consts"] + n_consts}


def _shard_map_params(eqn, body, n_consts, refs):
  from .sharding import PartitionSpec
  p = eqn.params
  ins = p["in_specs"]
  return {**p, "jaxpr": body, "in_specs": (PartitionSpec(),) * n_consts + tuple(ins),
          "out_specs": tuple(p["out_specs"]) + tuple(
              s for s, x in zip(ins, eqn.inputs) if isinstance(x.aval, AbstractRef))}


# --- custom_jvp and custom_vjp bodies may read a Ref, not write it ---------------------------

def _discharge_custom_call(eqn, vals, env):
  """A custom function's body reads a Ref it closes over: the call again,
  its body and rule reading the Ref's current value, passed in its place. A
  write isn't discharged: the rule can't say how the Ref's value changes (JAX
  doesn't discharge custom_jvp_call at all)."""
  p = eqn.params
  _read_only(p["call_jaxpr"].jaxpr, p["name"])
  body, _ = _discharged(p["call_jaxpr"].jaxpr, p["name"])
  body = ClosedJaxpr(_without_finals(body, p["call_jaxpr"].jaxpr), [])
  rule = "jvp_jaxpr_fun" if "jvp_jaxpr_fun" in p else "fwd"
  return eqn.primitive.bind(*vals, **{**p, "call_jaxpr": body,
                                      rule: ReadOnlyRule(p[rule], p["name"])})


def _read_only(jaxpr: Jaxpr, name: str):
  if any(isinstance(e, (effects.WriteEffect, effects.AccumEffect)) for e in jaxpr.effects):
    raise NotImplementedError(
        f"The custom function {name} writes a Ref it closes over, which its rule can't "
        "account for: write the Ref outside the custom function, passing in its value.")


def _without_finals(new: Jaxpr, old: Jaxpr) -> Jaxpr:
  return Jaxpr(new.constvars, new.invars, new.eqns, new.outvars[:len(old.outvars)])


class ReadOnlyRule:
  """A custom rule (`jvp_jaxpr_fun` or `fwd`) whose jaxpr reads Refs of its
  closure: the same rule, reading their values instead."""

  def __init__(self, rule, name):
    self.rule, self.name, self._jaxprs = rule, name, {}

  def __repr__(self):
    return repr(self.rule)

  def __call__(self, zeros: tuple):
    if zeros not in self._jaxprs:
      jaxpr, consts, *rest = self.rule(zeros)
      _read_only(jaxpr, self.name)
      new, _ = _discharged(jaxpr, self.name)
      self._jaxprs[zeros] = (_without_finals(new, jaxpr), consts, *rest)
    return self._jaxprs[zeros]


def _register_control_flow():
  from .control_flow import conditionals, loops
  discharge_rules[loops.scan_p] = _discharge_scan
  discharge_rules[loops.while_p] = _discharge_while
  discharge_rules[conditionals.cond_p] = _discharge_cond
  # A cond's branches take its inputs after the index; a while's jaxprs
  # take their consts, then the carry.
  effects.inner_jaxprs[conditionals.cond_p] = lambda params: [
      (b, 1) for b in params["branches"]]
  from .ad_checkpoint import remat_p
  from .custom_derivatives import custom_jvp_call_p, custom_vjp_call_p
  from .shard_map import shard_map_p
  from .xla import xla_call_p
  for p in (xla_call_p, remat_p, shard_map_p):
    discharge_rules[p] = _discharge_call
  call_params[xla_call_p] = _xla_call_params
  call_params[remat_p] = lambda eqn, body, n_consts, refs: {**eqn.params, "jaxpr": body}
  call_params[shard_map_p] = _shard_map_params
  for p in (custom_jvp_call_p, custom_vjp_call_p):
    discharge_rules[p] = _discharge_custom_call
    effects.inner_jaxprs[p] = lambda params: [(params["call_jaxpr"], 0)]
  effects.inner_jaxprs[loops.while_p] = lambda params: [
      (params["cond_jaxpr"], 0), (params["body_jaxpr"], params["cond_nconsts"])]


_register_control_flow()
