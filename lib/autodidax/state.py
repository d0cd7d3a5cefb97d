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

from . import ad, batching, core, effects
from . import primitives as lax
from .core import Primitive, ShapedArray, Tracer, abstract_eval_rules, impl_rules
from .jaxpr import ClosedJaxpr, Jaxpr, JaxprEqn, Lit, Var, eval_jaxpr, pp_eqn_rules, pp_params_rules
from .partial_eval import DynamicJaxprTrace, trace_to_jaxpr_dynamic
from .util import cache_by_jaxpr


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

class Slice:
  """`ds(start, size)`: `size` elements from `start`, which may be traced
  (JAX's `pl.ds`, from jax/_src/state/indexing.py). A slice `a:b` needs both
  ends static; this one's length is static, its start need not be."""

  def __init__(self, start, size: int):
    if not isinstance(size, (int, np.integer)) or size < 0:
      raise TypeError(f"ds(start, size): the size must be a static int >= 0, got {size!r}")
    self.start, self.size = start, int(size)

  def __repr__(self):
    return f"Slice(start={self.start!r}, size={self.size})"


def ds(start, size: int) -> Slice:
  """A dynamic slice for a Ref index: `x_ref[ds(i * 4, 4)]` reads 4 elements from i*4."""
  return Slice(start, size)


def _indexer(idx, shape):
  """`(entries, dynamic)`: per indexed dimension ("int", i), ("dyn",),
  ("slice", start, stop) or ("ds", size) (a traced start, of `ds`);
  `dynamic` holds the traced integer indices and starts."""
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
    elif isinstance(i, Slice):
      if i.size > d:
        raise IndexError(f"ds(..., {i.size}) is longer than the Ref's axis of size {d}")
      if isinstance(i.start, (int, np.integer)):
        if not 0 <= i.start <= d - i.size:
          raise IndexError(f"ds({i.start}, {i.size}) runs past a Ref axis of size {d}")
        entries.append(("slice", int(i.start), int(i.start) + i.size))
      else:
        entries.append(("ds", i.size))
        dynamic.append(i.start)
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
    elif e[0] == "ds":
      starts.append(next(dyn))
      sizes.append(e[1])
    else:
      starts.append(e[1] if e[0] == "int" else next(dyn))
      sizes.append(1)
  squeezed = [k for k, e in enumerate(entries) if e[0] in ("int", "dyn")]
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
  """A jaxpr is being staged, and no transformation runs above it: under
  jit(grad(f)), grad's new_ref is grad's box, whatever it holds."""
  top = core.find_top_trace(args).main
  return (top.trace_type is DynamicJaxprTrace
          and top.level >= core.trace_stack[-1].level)


def _boxed(ref) -> bool:
  """Whether to use the box `ref` directly (else its operations are staged,
  the box a constant of the jaxpr, as when a loop's body closes over it: the
  loop is then bound discharged, `bind_discharged`)."""
  if not isinstance(ref, Ref):
    return False
  return core.dynamic_trace is None or core.dynamic_trace.level <= ref.level


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
  val, *dynamic = [_check_stays_inside(ref, v) for v in (val, *dynamic)]
  old = read(ref._val, dynamic, entries)
  ref._val = write(ref._val, dynamic, entries, val)
  return old


def _check_stays_inside(ref, v):
  """`v`, written into the box `ref`, belongs to no transformation inside the
  one `ref` was made under (it would escape it: JAX refuses it too)."""
  v = core.full_lower(v)   # a value with no tangent, or shared by the batch, is no tracer
  if isinstance(v, Tracer) and v._trace.main.level > ref.level:
    raise core.EscapedTracerError(
        f"A value of an inner transformation ({v}) is written into a Ref made outside "
        "it: it would escape. Return it from the transformed function instead, or make "
        "the Ref inside the transformed function.")
  return v


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

def install_ref_indexing(cls):
  """`ref[...]` on a traced Ref reads it, `ref[i] = v` writes it; any other
  tracer keeps the indexing `cls` has (autodidax.numpy calls this after it
  gives tracers their NumPy methods)."""
  getitem, setitem = cls.__getitem__, getattr(cls, "__setitem__", None)

  def __getitem__(self, idx):
    return get(self, idx) if isinstance(self.aval, AbstractRef) else getitem(self, idx)

  def __setitem__(self, idx, val):
    if not isinstance(self.aval, AbstractRef):
      if setitem is None:
        raise TypeError("arrays are immutable: use x.at[idx].set(v), or a Ref")
      return setitem(self, idx, val)
    swap(self, idx, val)
  cls.__getitem__, cls.__setitem__ = __getitem__, __setitem__


# --- Printing as JAX does: `c:f32[3] <- b[...]`, `b[0] <- d`, `b[...] += d` ------------------

def _pp_index(entries, dyn_names):
  if not entries:
    return "..."
  dyn = iter(dyn_names)
  out = []
  for e in entries:
    if e[0] == "ds":
      start = next(dyn)
      out.append(f"{start}:{start}+{e[1]}")
    else:
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
  discharges it whole (`xla.discharge_call`)."""
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


def discharged_inner(closed):
  """A loop's or cond's jaxpr (closed or not) with the Refs it makes inside
  made values, for the loop's jvp, vmap and partial evaluation rules, which
  then meet only pure code (a Ref made in the body from a constant, then
  written with a tangent or a batch, needs no tangent or batch of its own).
  Refs it is passed stay, for the discharge of the whole equation."""
  j = getattr(closed, "jaxpr", closed)
  if not any(isinstance(e, effects.InternalMutableArrayEffect) for e in j.effects):
    return closed
  pure = discharge_if_stateful(j, ref_inputs_ok=True)
  return ClosedJaxpr(pure, closed.consts) if j is not closed else pure


def discharge_state(jaxpr: Jaxpr):
  """A pure jaxpr for `jaxpr` (constvars then invars become its inputs): each
  Ref input becomes a value input, and its final value an extra output,
  after the original outputs. Returns (jaxpr, consts)."""
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


# --- A box that a loop, cond or call closes over, while a transformation runs ----------------

def bind_discharged(prim, args, params) -> list:
  """Bind the higher-order `prim`, whose body closes over Ref boxes among
  `args`, in its discharged form: each box's value goes in (a loop's carry, a
  call's extra input) and the final value of each box it writes comes back
  into the box. So jvp, vmap and grad meet a loop of values, as they do under
  jit; JAX discharges such a loop's Refs the same way (state/discharge.py)."""
  ins, env, boxes = [], {}, {}
  for a in args:
    if type(a) is Ref:
      if id(a) not in boxes:
        boxes[id(a)] = (a, Var(a.aval))
        env[boxes[id(a)][1]] = a._val
      ins.append(boxes[id(a)][1])
    else:
      ins.append(Var(core.raise_to_shaped(core.get_aval(a))))
  out_avals = abstract_eval_rules[prim](*[v.aval for v in ins], **params)
  out_avals = out_avals if prim.multiple_results else [out_avals]
  eqn = JaxprEqn(prim, ins, params, [Var(a) for a in out_avals])
  written = {ins[e.input_index] for e in effects.inner_ref_effects(eqn)
             if isinstance(e, (effects.WriteEffect, effects.AccumEffect))}
  outs = discharge_rules[prim](eqn, [a._val if type(a) is Ref else a for a in args], env)
  for box, v in boxes.values():
    if v in written:
      box._val = _check_stays_inside(box, env[v])
  return outs if prim.multiple_results else outs[0]


def _bind_boxes(prim, trace, args, params):
  """core's hook: a higher-order primitive given boxes. Staged into a body
  above them, the box is a constant of that body (the body's own loop or call
  discharges it when it is bound); else it is bound discharged now."""
  if prim in (new_ref_p, get_p, swap_p, addupdate_p):
    return None
  if trace.main.trace_type is DynamicJaxprTrace and all(
      a.level < trace.main.level for a in args if type(a) is Ref):
    return None
  if prim not in discharge_rules:
    if any(type(a) is Ref and isinstance(a._val, Tracer) for a in args):
      raise NotImplementedError(
          f"Discharge rule for '{prim.name}' not implemented: its body uses a Ref made under "
          "a transformation (jvp, vmap, grad). Register one with "
          "`state.discharge_rules[prim] = rule`, or pass the Ref's value (ref[...]) in.")
    return None
  outs = bind_discharged(prim, args, params)
  return outs if prim.multiple_results else [outs]


core.box_types.add(Ref)
core.ref_box_hook = _bind_boxes


# --- jvp and vmap of the primitives, on a Ref that is a tracer (made inside a staged body) --
# As in JAX (state/primitives.py): a Ref's tangent is a Ref of tangents, or a
# symbolic Zero; a batched Ref holds the batch along its axis 0.

def _new_ref_jvp(primals, tangents):
  (x,), (t,) = primals, tangents
  return new_ref_p.bind(x), new_ref_p.bind(ad.instantiate_zeros(t))


def _get_jvp(primals, tangents, *, indexer):
  ref, *dyn = primals
  out = get_p.bind(ref, *dyn, indexer=indexer)
  t = tangents[0]
  return out, (ad.Zero.from_value(out) if type(t) is ad.Zero
               else get_p.bind(t, *dyn, indexer=indexer))


def _write_jvp(prim, primals, tangents, indexer):
  (ref, val, *dyn), (ref_t, val_t, *_) = primals, tangents
  if type(ref_t) is ad.Zero and type(val_t) is not ad.Zero:
    raise core.EscapedTracerError(   # JAX's words (its Exception)
        "performing a set/swap operation with a differentiated value on a "
        f"non-differentiated array reference of type {ref.aval.str_short()}. Move the "
        "array reference to be an argument of the differentiated function, or make it "
        "inside that function.")
  out = prim.bind(ref, val, *dyn, indexer=indexer)
  if type(ref_t) is ad.Zero:
    return out, ([] if prim.multiple_results else ad.Zero.from_value(out))
  out_t = prim.bind(ref_t, ad.instantiate_zeros(val_t), *dyn, indexer=indexer)
  return out, out_t


ad.jvp_rules[new_ref_p] = _new_ref_jvp
ad.jvp_even_if_zero.add(new_ref_p)   # its Ref may be written with a tangent later
ad.jvp_rules[get_p] = _get_jvp
ad.jvp_rules[swap_p] = lambda p, t, *, indexer: _write_jvp(swap_p, p, t, indexer)
ad.jvp_rules[addupdate_p] = lambda p, t, *, indexer: _write_jvp(addupdate_p, p, t, indexer)


def _batched_indexer(axis_size, indexer):
  return (("slice", 0, axis_size),) + tuple(indexer) if indexer else ()


def _new_ref_vmap(axis_size, vals_in, dims_in):
  (x,), (d,) = vals_in, dims_in
  return new_ref_p.bind(batching.move_batch_axis(axis_size, d, 0, x)), 0


def _get_vmap(axis_size, vals_in, dims_in, *, indexer):
  (ref, *dyn), (ref_d, *dyn_d) = vals_in, dims_in
  if any(d is not batching.not_mapped for d in dyn_d):
    raise NotImplementedError("vmap of a Ref read at batched indices (ref[i] with i "
                              "batched): read the whole Ref and index the value")
  out = get_p.bind(ref, *dyn, indexer=_batched_indexer(axis_size, indexer))
  return out, 0


def _write_vmap(prim, axis_size, vals_in, dims_in, indexer):
  (ref, val, *dyn), (ref_d, val_d, *dyn_d) = vals_in, dims_in
  if any(d is not batching.not_mapped for d in dyn_d):
    raise NotImplementedError("vmap of a Ref written at batched indices (ref[i] = v with "
                              "i batched): write the whole Ref instead")
  if ref_d is batching.not_mapped:   # JAX's words (its Exception)
    raise core.EscapedTracerError(
        "performing a set/swap operation with vmapped value on an unbatched array "
        f"reference of type {ref.aval.str_short()}. Move the array reference to be an "
        "argument to the vmapped function, or make it inside that function.")
  val = batching.move_batch_axis(axis_size, val_d, 0, val)
  out = prim.bind(ref, val, *dyn, indexer=_batched_indexer(axis_size, indexer))
  return out, ([] if prim.multiple_results else 0)


batching.vmap_rules[new_ref_p] = _new_ref_vmap
batching.vmap_even_if_unmapped.add(new_ref_p)   # its Ref may be written with a batch later
batching.vmap_rules[get_p] = _get_vmap
batching.vmap_rules[swap_p] = lambda n, v, d, *, indexer: _write_vmap(swap_p, n, v, d, indexer)
batching.vmap_rules[addupdate_p] = lambda n, v, d, *, indexer: _write_vmap(
    addupdate_p, n, v, d, indexer)


# --- Discharge through control flow and calls: helpers for the rules beside each
# higher-order primitive (control_flow, xla, ad_checkpoint, custom_derivatives,
# shard_map). A Ref a body reads or writes becomes a carry, or an extra output.

def run_discharged(closed, args, inputs):
  """Run a (closed) inner jaxpr discharged: `args` hold its Refs' values,
  `inputs` are the outer variables passed to its inputs (after its consts).
  Returns (outputs, the Refs' final values in input order)."""
  j, consts = getattr(closed, "jaxpr", closed), getattr(closed, "consts", [])
  new, new_consts = discharge_state(dealias(j, [None] * len(j.constvars) + list(inputs)))
  outs = eval_jaxpr(new, new_consts, *consts, *args)
  return outs[:len(j.outvars)], outs[len(j.outvars):]


def dealias(jaxpr: Jaxpr, inputs) -> Jaxpr:
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


def ref_slots(eqn, positions):
  """The distinct Ref variables among the inputs at `positions`."""
  refs = []
  for i in positions:
    x = eqn.inputs[i]
    if isinstance(x.aval, AbstractRef) and x not in refs:
      refs.append(x)
  return refs


def substitute(inputs, vals, refs, ref_vals):
  return [ref_vals[refs.index(x)] if x in refs else v for x, v in zip(inputs, vals)]


def updated(inputs, refs, ref_vals, finals):
  """Each Ref's value after a discharged body returned `finals` (one per
  Ref input, in order)."""
  ref_vals, seen = list(ref_vals), set()
  for x, f in zip([x for x in inputs if x in refs], finals):
    if x not in seen:   # a Ref passed twice: its first input holds its value
      ref_vals[refs.index(x)], seen = f, seen | {x}
  return ref_vals


def discharged_body(jaxpr: Jaxpr, what: str):
  """A call's body, discharged: (its jaxpr, taking the Refs' values as inputs
  and returning their final values after its outputs, and its new consts)."""
  new, consts = discharge_state(jaxpr)
  if consts:
    raise AssertionError(f"{what}: discharge made constants")
  return Jaxpr([], new.invars, new.eqns, new.outvars), consts


def discharged_call_body(jaxpr: Jaxpr, inputs, what: str):
  """`discharged_body(dealias(jaxpr, inputs), what)`, made once per jaxpr and
  pattern of Refs passed twice: a jit bound again with a box compiles once."""
  pattern = tuple(next(k for k, y in enumerate(inputs) if y is x)
                  if isinstance(x.aval, AbstractRef) else None for x in inputs)
  return _discharged_call_body(jaxpr, pattern, what)


@cache_by_jaxpr
def _discharged_call_body(jaxpr: Jaxpr, pattern, what: str):
  return discharged_body(dealias(jaxpr, pattern), what)


# `call_params[prim](eqn, body, num_new_consts, refs)`: the params of the
# call of `body`, which returns after its outputs the final value of each
# Ref input (a Ref passed twice, twice).
call_params: dict = {}
