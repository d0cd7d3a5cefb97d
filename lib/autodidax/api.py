"""The user-facing transformations, with JAX's signatures.

Each one flattens pytrees, checks its arguments (so mistakes get a message
that says what to do), and calls the flat version from its interpreter module.
"""
from __future__ import annotations

import numpy as np

from . import ad
from . import primitives as lax
from . import partial_eval as pe
from .ad import jvp_flat
from .api_util import TransformationError, shaped_abstractify, split_static
from .batching import move_batch_axis, not_mapped, vmap_flat
from .core import ShapedArray, Tracer, array_types, get_aval
from .jaxpr import ClosedJaxpr, eval_jaxpr
from .partial_eval import trace_to_closed_jaxpr
from .tree_util import (TreeMismatchError, broadcast_prefix, flatten_fun,
                        tree_flatten, tree_unflatten)
from .util import canonicalize_axis


class OutputTypeError(TransformationError, TypeError):
  """A function's output has a type the transformation can't use (grad of a
  vector or of an int): a TypeError, as JAX raises."""


def _check_arrays(what: str, leaves):
  for x in leaves:
    get_aval(x)   # raises UnsupportedTypeError with advice


# --- jvp ----------------------------------------------------------------------------------

def jvp(fun, primals, tangents):
  """Evaluate `fun(*primals)` and its directional derivative along `tangents`."""
  if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
    raise TransformationError(
        "jvp: primals and tangents must be tuples (or lists) with one entry "
        f"per argument of the function, e.g. jvp(f, (x,), (1.,)); got "
        f"{type(primals).__name__} and {type(tangents).__name__}.")
  primals_flat, in_tree = tree_flatten(tuple(primals))
  tangents_flat, in_tree2 = tree_flatten(tuple(tangents))
  if in_tree != in_tree2:
    raise TreeMismatchError("jvp: primals and tangents", in_tree, in_tree2)
  _check_arrays("jvp", primals_flat + tangents_flat)
  tangents_flat = [_tangent_for(p, t) for p, t in zip(primals_flat, tangents_flat)]
  flat_fun, out_tree = flatten_fun(fun, in_tree)
  primals_out, tangents_out = jvp_flat(flat_fun, primals_flat, tangents_flat)
  return (tree_unflatten(out_tree(), primals_out),
          tree_unflatten(out_tree(), tangents_out))


def _tangent_for(primal, tangent):
  p, t = get_aval(primal), get_aval(tangent)
  if p.shape != t.shape:
    raise TransformationError(
        f"jvp: each tangent must have its primal's shape; got primal "
        f"{p.str_short()} with tangent {t.str_short()}.")
  if p.dtype.kind not in "fc" and t.dtype != p.dtype:
    raise TypeError(
        f"jvp: primal {p.str_short()} is not a float, so it has no tangent "
        f"space, but its tangent is {t.str_short()}. JAX asks for a float0 "
        "tangent here, a dtype autodidax leaves out: pass zeros of the "
        "primal's dtype, or keep the argument out of jvp (close over it).")
  if type(tangent) in (bool, int, float):
    if np.issubdtype(p.dtype, np.inexact) and t.dtype != p.dtype:
      return p.dtype.type(tangent)   # a Python scalar takes the primal's dtype
  elif t.dtype != p.dtype and np.issubdtype(p.dtype, np.inexact):
    raise TransformationError(
        f"jvp: each tangent must have its primal's dtype; got primal "
        f"{p.str_short()} with tangent {t.str_short()}. Convert the tangent "
        f"with .astype({p.dtype.name}).")
  return tangent


# --- vmap ---------------------------------------------------------------------------------

def vmap(fun, in_axes=0, out_axes=0, axis_name=None, axis_size=None):
  """Vectorize `fun` over the axes `in_axes` of its arguments.

  `in_axes` is an int, None (don't map), or a tuple with one entry per
  positional argument, each itself an int/None or a pytree prefix of it.
  `axis_name` names the batch axis for collectives inside `fun`
  (`lax.psum(x, axis_name)`, ...); `axis_size` is the batch size, needed
  only when no argument is mapped.
  """
  def batched_fun(*args, **kwargs):
    if kwargs:   # keyword arguments are mapped over axis 0, as in JAX
      return vmap(lambda a, kw: fun(*a, **kw), in_axes=(
          tuple(in_axes) if isinstance(in_axes, (tuple, list)) else in_axes, 0),
          out_axes=out_axes, axis_name=axis_name, axis_size=axis_size)(args, kwargs)
    axes = tuple(in_axes) if isinstance(in_axes, list) else in_axes
    if isinstance(axes, tuple) and len(axes) != len(args):
      raise TransformationError(
          f"vmap: in_axes={in_axes!r} has {len(axes)} entries but the function "
          f"was called with {len(args)} positional arguments; give one entry "
          "per argument (or a single int/None for all of them).")
    if not isinstance(axes, tuple):
      axes = (axes,) * len(args)
    args_flat, in_tree = tree_flatten(args)
    try:
      axes_flat = broadcast_prefix(axes, args, "vmap in_axes")
    except ValueError as e:
      raise TransformationError(str(e)) from None
    _check_arrays("vmap", args_flat)
    axes_flat = [_check_axis(x, ax, i) for i, (x, ax) in enumerate(zip(args_flat, axes_flat))]
    _check_sizes(args_flat, axes_flat, axis_size)
    flat_fun, out_tree = flatten_fun(fun, in_tree)
    vals_out, bdims_out, size = vmap_flat(flat_fun, axes_flat, *args_flat,
                                          axis_name=axis_name, axis_size=axis_size)
    out_tree = out_tree()
    try:
      out_axes_flat = broadcast_prefix(out_axes, tree_unflatten(out_tree, vals_out),
                                       "vmap out_axes")
    except ValueError as e:
      raise TransformationError(str(e)) from None
    outs = [_move_out(size, v, bd, ax) for v, bd, ax in zip(vals_out, bdims_out, out_axes_flat)]
    return tree_unflatten(out_tree, outs)
  batched_fun.__name__ = f"vmap({getattr(fun, '__name__', 'fun')})"
  batched_fun.__wrapped__ = fun   # its signature is fun's, as JAX's wraps says
  return batched_fun


def _check_axis(x, ax, i):
  if ax is None:
    return not_mapped
  if not isinstance(ax, (int, np.integer)):
    raise TransformationError(f"vmap: in_axes entries must be ints or None; got {ax!r}.")
  nd = np.ndim(x)
  if not -nd <= ax < nd:
    raise TransformationError(
        f"vmap: in_axes asks to map argument {i} (shape {np.shape(x)}) along "
        f"axis {ax}, but it has only {nd} axes. Use None for arguments that "
        "are not mapped.")
  return canonicalize_axis(int(ax), nd)


def _check_sizes(args_flat, axes_flat, axis_size=None):
  sizes = [(i, np.shape(x), ax, np.shape(x)[ax])
           for i, (x, ax) in enumerate(zip(args_flat, axes_flat)) if ax is not not_mapped]
  if not sizes and axis_size is None:
    raise TransformationError(
        "vmap: no argument is mapped (in_axes are all None). Map at least one, "
        "or give the batch size as axis_size.")
  if len({s for *_, s in sizes} | ({axis_size} if axis_size is not None else set())) > 1:
    lines = "\n".join(f"  argument {i} of shape {shp} has size {s} along axis {ax}"
                      for i, shp, ax, s in sizes)
    given = f"\n  axis_size={axis_size}" if axis_size is not None else ""
    raise TransformationError(
        f"vmap got inconsistent sizes for the mapped axis:\n{lines}{given}\n"
        "Every mapped argument must have the same size along its mapped axis.")


def _move_out(size, val, bdim, out_axis):
  if out_axis is None:
    if bdim is not not_mapped:
      raise TransformationError(
          "vmap: out_axes=None for an output that varies across the batch. "
          "Only outputs that don't depend on mapped inputs can be unmapped.")
    return val
  if not isinstance(out_axis, (int, np.integer)):
    raise TransformationError(f"vmap: out_axes entries must be ints or None; got {out_axis!r}.")
  nd = np.ndim(val) + (bdim is not_mapped)   # the output's rank, batch axis included
  if not -nd <= out_axis < nd:
    raise TransformationError(
        f"vmap: out_axes={out_axis} is out of range for an output of rank {nd} "
        f"(with its batch axis); use an axis in [{-nd}, {nd - 1}].")
  out_axis = canonicalize_axis(int(out_axis), nd)
  return move_batch_axis(size, bdim, out_axis, val)


# --- jacfwd -------------------------------------------------------------------------------

def jacfwd(fun, argnums=0):
  """The Jacobian of `fun` by forward mode: one jvp per input direction, vmapped.

  For input leaves x_j and output leaves y_i, the result holds arrays of shape
  y_i.shape + x_j.shape, arranged as the output tree of input trees.
  """
  def jacfun(*args, **kwargs):
    f, x = _partial_argnums(fun, args, argnums, kwargs)
    x_flat, x_tree = tree_flatten(x)
    _check_arrays("jacfwd", x_flat)
    _check_real("jacfwd", x_flat)

    def pushfwd(j, direction):   # the outputs' tangent along a direction of leaf j
      tangents = [np.zeros(np.shape(xk), _tangent_dtype(xk)) for xk in x_flat]
      tangents[j] = _reshape(direction, np.shape(x_flat[j]))
      return jvp(f, (x,), (tree_unflatten(x_tree, tangents),))[1]

    # All directions of leaf j at once: the rows of an identity matrix.
    columns = [vmap(lambda v, j=j: pushfwd(j, v), out_axes=-1)(
        np.eye(np.size(xj), dtype=_tangent_dtype(xj))) for j, xj in enumerate(x_flat)]
    return _jacobian_tree(columns, x_flat, x_tree)
  return jacfun


def _partial_argnums(fun, args, argnums, kwargs):
  """`fun` as a function of the arguments `argnums` picks (one, or a tuple of
  them), the others fixed to `args` and `kwargs`; and the picked arguments' values."""
  nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)

  def f(picked):
    full = list(args)
    for i, v in zip(nums, (picked,) if isinstance(argnums, int) else picked):
      full[i] = v
    return fun(*full, **kwargs)
  return f, (args[argnums] if isinstance(argnums, int) else tuple(args[i] for i in nums))


def _check_real(what, leaves):
  """Jacobians need float inputs, as in JAX (an int has no tangent space)."""
  for x in leaves:
    dtype = get_aval(x).dtype
    if dtype.kind != "f":
      raise TypeError(
          f"{what} requires real-valued (float) inputs, but an input has "
          f"dtype {dtype.name}. Convert it to a float, or leave it out of "
          "argnums.")


def _tangent_dtype(x):
  dtype = np.result_type(x)
  return dtype if np.issubdtype(dtype, np.inexact) else np.dtype(np.float64)


def _jacobian_tree(columns, x_flat, x_tree):
  """`columns[j]` is the output tree for input leaf j, each leaf of shape
  y.shape + (x_j.size,). Regroup it as the output tree of input trees, each
  block of shape y.shape + x_j.shape."""
  cols_flat = [tree_flatten(c)[0] for c in columns]
  out_tree = tree_flatten(columns[0])[1]
  blocks = [tree_unflatten(x_tree, [_reshape(col[i], np.shape(col[i])[:-1] + np.shape(xj))
                                    for col, xj in zip(cols_flat, x_flat)])
            for i in range(out_tree.num_leaves)]
  return tree_unflatten(out_tree, blocks)


def _reshape(x, shape):
  return x if np.shape(x) == tuple(shape) else lax.reshape(x, shape)


# --- make_jaxpr -----------------------------------------------------------------------------

def make_jaxpr(fun, static_argnums=()):
  """`make_jaxpr(f)(*args)` stages `f` into a ClosedJaxpr for args like these.

  Arguments may be arrays, Python scalars, pytrees of them, or abstract specs
  (anything with `.shape` and `.dtype`, e.g. a ShapedArray). Arguments listed
  in `static_argnums` are passed to `f` as they are, not traced.
  """
  static = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)

  def make(*args, **kwargs):
    fun_dyn, dyn_args, _ = split_static(fun, args, static, kwargs)
    args_flat, in_tree = tree_flatten(dyn_args)
    in_avals = [shaped_abstractify(x) for x in args_flat]
    flat_fun, _ = flatten_fun(fun_dyn, in_tree)
    return trace_to_closed_jaxpr(flat_fun, in_avals)
  make.__name__ = f"make_jaxpr({getattr(fun, '__name__', 'fun')})"
  return make


# --- Reverse mode: linearize, vjp, grad (Part 4) ---------------------------------------------

def _split_half(xs):
  n = len(xs) // 2
  return list(xs[:n]), list(xs[n:])


def _tangent_aval(x):
  aval = get_aval(x)   # (a tangent lives where its primal does: same sharding and vma)
  return ShapedArray(np.shape(x), np.result_type(aval.dtype), sharding=aval.sharding,
                     vma=aval.vma)


def _check_like(what, kind, owner, values, avals):
  """Each `kind` (tangent, cotangent) must have the shape and dtype of the
  `owner` it stands for (primal, output); a Python scalar takes the dtype."""
  for v, want in zip(values, avals):
    got = get_aval(v)
    if got.shape != want.shape or (type(v) not in (bool, int, float) and got.dtype != want.dtype):
      raise TransformationError(
          f"{what}: each {kind} must have its {owner}'s shape and dtype; got a {kind} "
          f"{got.str_short()} where the {owner} is {want.str_short()}. Make it like "
          f"the {owner}, e.g. with anp.ones_like or .astype.")


def linearize_flat(f, primals_in):
  """jvp with the tangents unknown: the primal part runs now, the tangent part
  is staged into a linear jaxpr (plus the residuals it needs)."""
  pvals_in = ([pe.PartialVal.known(x) for x in primals_in] +
              [pe.PartialVal.unknown(_tangent_aval(x)) for x in primals_in])

  def f_jvp(*primals_tangents_in):
    primals_out, tangents_out = jvp_flat(f, *_split_half(primals_tangents_in))
    return [*primals_out, *tangents_out]

  # Every tangent output is an output of the linear jaxpr, even a known zero.
  tangents_unknown = lambda n: [False] * (n // 2) + [True] * (n // 2)
  jaxpr, pvals_out, consts = pe.partial_eval_flat(f_jvp, pvals_in, tangents_unknown)
  primal_pvals, _ = _split_half(pvals_out)
  assert all(p.is_known for p in primal_pvals)
  return [p.const for p in primal_pvals], jaxpr, consts


def linearize(fun, *primals):
  """`(y, f_lin) = linearize(f, *xs)`: f_lin(*tangents) is jvp's tangent part,
  with no linearization work left to do (as jax.linearize)."""
  primals_flat, in_tree = tree_flatten(primals)
  _check_arrays("linearize", primals_flat)
  flat_fun, out_tree = flatten_fun(fun, in_tree)
  primals_out, jaxpr, consts = linearize_flat(flat_fun, primals_flat)
  out_tree = out_tree()

  def f_lin(*tangents):
    tangents_flat, tree2 = tree_flatten(tangents)
    if tree2 != in_tree:
      raise TreeMismatchError("linearize: tangents", in_tree, tree2)
    _check_like("linearize", "tangent", "primal", tangents_flat,
                [_tangent_aval(p) for p in primals_flat])
    return tree_unflatten(out_tree, eval_jaxpr(jaxpr, consts, *tangents_flat))
  f_lin.jaxpr = ClosedJaxpr(jaxpr, consts)
  return tree_unflatten(out_tree, primals_out), f_lin


def vjp_flat(f, primals_in):
  """Linearize, then transpose the linear jaxpr: cotangents flow backwards."""
  primals_out, jaxpr, consts = linearize_flat(f, primals_in)
  undefined = [ad.UndefPrimal(_tangent_aval(x)) for x in primals_in]

  def f_vjp(*cts):
    cts_in = ad.backward_pass(jaxpr, [*consts, *undefined], cts)
    return [ad.instantiate_zeros(ct) for ct in cts_in]
  f_vjp.jaxpr = ClosedJaxpr(jaxpr, consts)
  return primals_out, f_vjp


def vjp(fun, *primals, has_aux=False):
  """`(y, f_vjp) = vjp(f, *xs)`: f_vjp(cotangent of y) gives cotangents of xs."""
  primals_flat, in_tree = tree_flatten(primals)
  _check_arrays("vjp", primals_flat)
  if has_aux:
    aux_store = []
    def fun_main(*args):
      res = fun(*args)
      if not isinstance(res, (tuple, list)) or len(res) != 2:
        got = (f"a {type(res).__name__} of length {len(res)}" if isinstance(res, (tuple, list))
               else "an array" if isinstance(res, (Tracer, *array_types)) else type(res).__name__)
        raise TypeError("with has_aux=True the function must return a two-element "
                        f"tuple (output, aux), but it returned {got}.")
      aux_store.append(tree_flatten(res[1]))
      return res[0]
  else:
    fun_main = fun
  flat_fun, out_tree = flatten_fun(fun_main, in_tree)
  if has_aux:   # traced aux leaves leave as extra outputs, to come out
    flat_main = flat_fun   # concrete; others (a str, a constant) as they are
    flat_fun = lambda *args: [*flat_main(*args), *(
        x for x in aux_store[-1][0] if isinstance(x, Tracer))]
  primals_out, f_vjp_flat = vjp_flat(flat_fun, primals_flat)
  out_tree = out_tree()
  aux_out, primals_out = primals_out[out_tree.num_leaves:], primals_out[:out_tree.num_leaves]
  aux_cts = [ad.Zero.from_value(x) for x in aux_out]   # no cotangent flows from aux

  def f_vjp(ct):
    cts_flat, tree2 = tree_flatten(ct)
    if tree2 != out_tree:
      raise TreeMismatchError("vjp: the cotangent must be structured like the output", out_tree, tree2)
    _check_like("vjp", "cotangent", "output", cts_flat, [get_aval(y) for y in primals_out])
    return tree_unflatten(in_tree, f_vjp_flat(*cts_flat, *aux_cts))
  f_vjp.jaxpr = f_vjp_flat.jaxpr   # the linear jaxpr that the backward pass runs
  out = tree_unflatten(out_tree, primals_out)
  if not has_aux:
    return out, f_vjp
  leaves, aux_tree = aux_store[-1]
  traced = iter(aux_out)
  aux = [next(traced) if isinstance(x, Tracer) else x for x in leaves]
  return out, f_vjp, tree_unflatten(aux_tree, aux)


def value_and_grad(fun, argnums=0, has_aux=False):
  """The value of `fun` and its gradient with respect to argument(s) `argnums`.
  Keyword arguments are passed through, not differentiated (as in JAX)."""
  def value_and_grad_fun(*args, **kwargs):
    if kwargs:
      return value_and_grad(lambda *a: fun(*a, **kwargs), argnums, has_aux)(*args)
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    if not nums:
      raise TransformationError("grad: argnums=() picks no argument to differentiate "
                                "with respect to; give at least one")
    for i in nums:
      if not -len(args) <= i < len(args):
        raise TransformationError(f"grad: argnums={argnums} but the function got "
                                  f"{len(args)} arguments")
    dyn = tuple(args[i] for i in nums)
    for x in tree_flatten(dyn)[0]:
      dt = get_aval(x).dtype
      if not np.issubdtype(dt, np.inexact):
        raise TypeError(
            f"grad requires floating-point inputs, but an argument differentiated "
            f"(argnums={argnums}) has dtype {dt.name}. Convert it to a float, leave "
            "it out of argnums, or use vjp.")

    def f_dyn(*d):
      full = list(args)
      for i, v in zip(nums, d):
        full[i] = v
      return fun(*full)

    res = vjp(f_dyn, *dyn, has_aux=has_aux)
    out, f_vjp = res[:2]
    aval = get_aval(out) if not isinstance(out, (tuple, list, dict)) else None
    if aval is None or aval.shape != () or not np.issubdtype(aval.dtype, np.inexact):
      got = aval.str_short() if aval is not None else f"a {type(out).__name__}"
      raise OutputTypeError(
          f"grad requires a function returning one real scalar, but it returned "
          f"{got}{' (with has_aux=True, return (scalar, aux))' if has_aux else ''}. "
          "For non-scalar outputs use vjp, or jacrev/jacfwd for Jacobians.")
    # A weakly typed traced output's seed is weak too (a Python 1.0), so that
    # jit(grad(f))(0.7) is weakly typed, as JAX's; eagerly, an array.
    weak = isinstance(out, Tracer) and aval.weak_type and aval.dtype == np.float64
    grads = f_vjp(1. if weak else np.ones((), aval.dtype))
    grads = grads[0] if isinstance(argnums, int) else tuple(grads)
    return ((out, res[2]), grads) if has_aux else (out, grads)
  return value_and_grad_fun


def grad(fun, argnums=0, has_aux=False):
  """The gradient of scalar-valued `fun` with respect to argument(s) `argnums`."""
  vg = value_and_grad(fun, argnums, has_aux)

  def grad_fun(*args, **kwargs):
    (value, aux), g = vg(*args, **kwargs) if has_aux else ((None, None), vg(*args, **kwargs)[1])
    return (g, aux) if has_aux else g
  return grad_fun


def jacrev(fun, argnums=0):
  """The Jacobian by reverse mode: one vjp per output direction, vmapped.
  Like jacfwd's, the result is the output tree of input trees."""
  def jacfun(*args, **kwargs):
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    dyn = tuple(args[i] for i in nums)

    def f_dyn(*d):
      full = list(args)
      for i, v in zip(nums, d):
        full[i] = v
      return fun(*full, **kwargs)

    _check_real("jacrev", tree_flatten(dyn)[0])
    y, f_vjp = vjp(f_dyn, *dyn)
    y_flat, y_tree = tree_flatten(y)
    x_flat = tree_flatten(dyn)[0]
    blocks = []
    for i, yi in enumerate(y_flat):   # one vmapped vjp per output leaf
      n = int(np.size(yi))
      dtype = np.result_type(get_aval(yi).dtype)
      basis = [np.zeros((n, *np.shape(yk)), np.result_type(get_aval(yk).dtype))
               for yk in y_flat]
      basis[i] = np.eye(n, dtype=dtype).reshape((n, *np.shape(yi)))
      cols = vmap(lambda ct: f_vjp(tree_unflatten(y_tree, ct)))(basis)
      cols_flat, cols_tree = tree_flatten(cols)
      blocks.append(tree_unflatten(cols_tree, [
          _reshape(c, (*np.shape(yi), *np.shape(x))) for c, x in zip(cols_flat, x_flat)]))
    per_leaf = [b[0] if isinstance(argnums, int) else tuple(b) for b in blocks]
    return tree_unflatten(y_tree, per_leaf)
  return jacfun


def hessian(fun, argnums=0):
  """The matrix of second derivatives: forward over reverse, as in JAX."""
  return jacfwd(jacrev(fun, argnums), argnums)
