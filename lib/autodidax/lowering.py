"""Lowering jaxprs to StableHLO, the input language of the XLA compiler.

Lowering is one more jaxpr interpreter: it walks the equations and, instead of
computing values, writes MLIR text, one StableHLO operation (or a few) per
equation. The text goes to runtime.compile, the only place we touch jaxlib.

    module @jit_f {
      func.func public @main(%arg0: tensor<3xf32>) -> (tensor<3xf32>) {
        %0 = stablehlo.sine %arg0 : tensor<3xf32>
        return %0 : tensor<3xf32>
      }
    }
"""
from __future__ import annotations

import math
import re

import numpy as np

from . import primitives as lax
from .core import RuleTable, ShapedArray
from .effects import is_ordered
from .jaxpr import Jaxpr, Lit

# `rule(ctx, *operands, **params)` emits ops and returns the result name(s).
lowering_rules = RuleTable(
    "Lowering", "Register one with `lowering.lowering_rules[prim] = rule`.")


def register_lowering(prim, rule):
  """JAX's spelling (`mlir.register_lowering`) of `lowering_rules[prim] = rule`."""
  lowering_rules[prim] = rule
  return rule


# --- Types and constants ---------------------------------------------------------------------

_MLIR_DTYPES = {"float16": "f16", "float32": "f32", "float64": "f64", "bool": "i1",
                "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
                "uint8": "ui8", "uint16": "ui16", "uint32": "ui32", "uint64": "ui64",
                "complex64": "complex<f32>", "complex128": "complex<f64>"}


class AbstractToken:
  """The type of a token: no data, an order. An ordered effect (autodidax.
  callback) takes the latest token and makes the next; a function, a loop or
  a cond with ordered effects inside takes one and returns one."""

  def __repr__(self):
    return "Token"


abstract_token = AbstractToken()


def mlir_type(aval) -> str:
  """`f32[3,4]` is `tensor<3x4xf32>`; a scalar is `tensor<f32>`."""
  if aval is abstract_token:
    return "!stablehlo.token"
  name = np.dtype(aval.dtype).name
  if name not in _MLIR_DTYPES:
    raise TypeError(f"jit: autodidax can't compile arrays of dtype {name}; use one of "
                    f"{', '.join(_MLIR_DTYPES)}")
  dtype = _MLIR_DTYPES[name]
  return f"tensor<{''.join(f'{d}x' for d in aval.shape)}{dtype}>"


def _mlir_scalar(val, dtype) -> str:
  dtype = np.dtype(dtype)
  if dtype == np.bool_:
    return "true" if val else "false"
  if np.issubdtype(dtype, np.integer):
    return str(int(val))
  v = float(val)
  if math.isfinite(v):
    r = repr(v)   # MLIR floats need a ".": write 1e-08 as 1.0e-08
    return r if "." in r else r.replace("e", ".0e") if "e" in r else f"{v:.1f}"
  bits = np.array(v, dtype).view(f"u{dtype.itemsize}")   # MLIR writes inf/nan in hex
  return f"0x{int(bits):0{2 * dtype.itemsize}X}"


def dense_literal(x: np.ndarray) -> str:
  """A `dense<...>` attribute holding the array `x`."""
  x = np.asarray(x)
  flat = x.ravel()
  # One value for all (compared bitwise, so that 0.0 and -0.0 differ), or
  # none (a splat fits an empty array of any shape):
  if not flat.size or flat.tobytes() == flat[:1].tobytes() * flat.size:
    return f"dense<{_mlir_scalar(flat[0] if flat.size else 0, x.dtype)}>"

  def nest(a):
    return (_mlir_scalar(a, x.dtype) if a.ndim == 0
            else "[" + ", ".join(nest(sub) for sub in a) + "]")
  return f"dense<{nest(x)}>"


# --- The lowering context ------------------------------------------------------------------

class Module:
  """A StableHLO module being written: its functions, by name."""

  def __init__(self, name: str):
    self.name = re.sub(r"\W", "_", name)   # an MLIR symbol: letters, digits, _
    self.functions: list[str] = []
    self._lowered: dict = {}   # id(jaxpr) -> private function name
    # A program for many devices (autodidax.spmd) adds module attributes (the
    # number of partitions) and a header (the device mesh).
    self.attributes: list[str] = []
    self.header: list[str] = []
    # Python functions the program calls back (autodidax.callback): the
    # custom call's `index` is a position here; they go to runtime.compile.
    self.host_callbacks: list = []
    self.ordered = False   # whether @main takes the runtime's token and returns the next

  def private_function(self, jaxpr: Jaxpr, name: str, token: bool = False) -> str:
    """Lower `jaxpr` once as a private function; returns its symbol."""
    key = id(jaxpr)
    if key not in self._lowered:
      sym = re.sub(r"\W", "_", f"{name}_{len(self._lowered)}")
      self._lowered[key] = (sym, jaxpr)   # keep jaxpr alive while its id is a key
      self.functions.append(lower_function(self, jaxpr, sym, public=False, token=token))
    return self._lowered[key][0]

  def text(self) -> str:
    body = "\n".join([f"  {line}" for line in self.header] + self.functions)
    attrs = f" attributes {{{', '.join(self.attributes)}}}" if self.attributes else ""
    return f"module @{self.name}{attrs} {{\n{body}\n}}\n"


class LoweringContext:
  """Emits the ops of one function body, with fresh SSA names."""

  def __init__(self, module: Module, counter: list | None = None):
    self.module = module
    self.lines: list[str] = []
    self._counter = counter if counter is not None else [0]
    self.avals_in: list = []
    self.avals_out: list = []
    self.token: str | None = None   # the latest ordered effect's (autodidax.callback)

  def fresh(self) -> str:
    self._counter[0] += 1
    return f"%{self._counter[0] - 1}"

  def emit(self, op: str, result: bool = True) -> str:
    """Append `%N = op` (or just `op`), returning the new name."""
    if not result:
      self.lines.append(op)
      return ""
    name = self.fresh()
    self.lines.append(f"{name} = {op}")
    return name

  def constant(self, val, dtype) -> str:
    aval = ShapedArray(np.shape(val), dtype)
    return self.emit(f"stablehlo.constant {dense_literal(np.asarray(val, dtype))} : {mlir_type(aval)}")

  def convert(self, x: str, aval, dtype) -> str:
    if np.dtype(aval.dtype) == np.dtype(dtype):
      return x
    return self.emit(f"stablehlo.convert {x} : ({mlir_type(aval)}) -> "
                     f"{mlir_type(ShapedArray(aval.shape, dtype))}")

  def broadcast_in_dim(self, x: str, aval, shape, dims) -> str:
    if tuple(aval.shape) == tuple(shape):
      return x
    return self.emit(f"stablehlo.broadcast_in_dim {x}, dims = {list(dims)} : "
                     f"({mlir_type(aval)}) -> {mlir_type(ShapedArray(shape, aval.dtype))}")

  def sub_context(self, token: str | None = None) -> "LoweringContext":
    sub = LoweringContext(self.module, self._counter)
    sub.token = token
    return sub

  def current_token(self) -> str:
    """The latest token, made here if nothing ordered came before."""
    if self.token is None:
      self.token = self.emit("stablehlo.after_all : !stablehlo.token")
    return self.token


def lower_function(module: Module, jaxpr: Jaxpr, name: str, public: bool,
                   arg_attrs=None, result_attrs=None, token: bool = False) -> str:
  """One `func.func`: constvars then invars are its arguments. `arg_attrs`
  and `result_attrs` (strings, e.g. a sharding) annotate them. With `token`,
  a token comes first among the arguments and among the results."""
  ctx = LoweringContext(module)
  args = [(f"%arg{i}", v) for i, v in enumerate(jaxpr.constvars + jaxpr.invars)]
  env = {v: n for n, v in args}
  ctx.token = "%token" if token else None
  outs = lower_jaxpr_body(ctx, jaxpr, env)
  arg_attrs = arg_attrs or [""] * len(args)
  result_attrs = result_attrs or [""] * len(jaxpr.outvars)
  sig = ", ".join(f"{n}: {mlir_type(v.aval)}{a and ' ' + a}" for (n, v), a in zip(args, arg_attrs))
  out_types = ", ".join(f"{mlir_type(x.aval)}{a and ' ' + a}"
                        for x, a in zip(jaxpr.outvars, result_attrs))
  ret_types = ", ".join(mlir_type(x.aval) for x in jaxpr.outvars)
  if token:   # the runtime's token (autodidax.runtime) in and out
    attr = " {jax.token = true}" if public else ""
    sig = f"%token: !stablehlo.token{attr}" + (sig and ", " + sig)
    out_types = f"!stablehlo.token{attr}" + (out_types and ", " + out_types)
    ret_types = "!stablehlo.token" + (ret_types and ", " + ret_types)
    outs = [ctx.token, *outs]
  ret = f"    return {', '.join(outs)} : {ret_types}" if outs else "    return"
  body = "\n".join(f"    {line}" for line in ctx.lines)
  vis = "public" if public else "private"
  return (f"  func.func {vis} @{name}({sig}) -> ({out_types}) {{\n"
          f"{body + chr(10) if body else ''}{ret}\n  }}")


def lower_jaxpr_body(ctx: LoweringContext, jaxpr: Jaxpr, env: dict) -> list[str]:
  """Emit every equation; returns the names of the outputs."""

  def read(x) -> str:
    if isinstance(x, Lit):
      return ctx.constant(x.val, x.aval.dtype)
    return env[x]

  for eqn in jaxpr.eqns:
    operands = [read(x) for x in eqn.inputs]
    ctx.avals_in = [x.aval for x in eqn.inputs]
    ctx.avals_out = [v.aval for v in eqn.out_binders]
    outs = lowering_rules[eqn.primitive](ctx, *operands, **eqn.params)
    if not eqn.primitive.multiple_results:
      outs = [outs]
    for v, name in zip(eqn.out_binders, outs):
      env[v] = name if v.aval.sharding is None else sharding_constraint(ctx, name, v.aval)
  return [read(x) for x in jaxpr.outvars]


def sharding_constraint(ctx, x: str, aval) -> str:
  """A result whose type has a sharding (Explicit axes): the partitioner must
  give it that layout, `sdy.sharding_constraint %x <@mesh, [{"data"}, {}]>`."""
  if getattr(ctx.module, "mesh", None) is None:
    return x
  out = ctx.fresh()
  dims = ", ".join("{" + ", ".join(f'"{a}"' for a in axes) + "}"
                   for axes in aval.sharding.spec.normalized(aval.ndim))
  ctx.emit(f"{out} = sdy.sharding_constraint {x} <@mesh, [{dims}]> : {mlir_type(aval)}",
           result=False)
  return out


def lower_jaxpr(jaxpr: Jaxpr, name: str = "jit_fun") -> str:
  """The module for a jaxpr: its constvars and invars become @main's arguments."""
  return lower_module(jaxpr, name).text()


def lower_module(jaxpr: Jaxpr, name: str = "jit_fun") -> Module:
  """`lower_jaxpr`'s Module, with the host callbacks its text calls."""
  module = Module(name)
  module.ordered = is_ordered(jaxpr.effects)
  module.functions.append(lower_function(module, jaxpr, "main", public=True,
                                         token=module.ordered))
  return module


# --- Rules ---------------------------------------------------------------------------------------

_BINARY_OPS = {lax.add_p: "add", lax.sub_p: "subtract", lax.mul_p: "multiply",
               lax.div_p: "divide", lax.min_p: "minimum",
               lax.pow_p: "power", lax.rem_p: "remainder", lax.and_p: "and",
               lax.or_p: "or", lax.xor_p: "xor"}
_COMPARISONS = {lax.greater_p: "GT", lax.less_p: "LT", lax.greater_equal_p: "GE",
                lax.less_equal_p: "LE", lax.eq_p: "EQ", lax.ne_p: "NE"}
_UNARY_OPS = {lax.neg_p: "negate", lax.sin_p: "sine", lax.cos_p: "cosine",
              lax.exp_p: "exponential", lax.log_p: "log", lax.tanh_p: "tanh",
              lax.not_p: "not", lax.abs_p: "abs", lax.sign_p: "sign",
              lax.sqrt_p: "sqrt", lax.rsqrt_p: "rsqrt", lax.floor_p: "floor"}


def _prepare_binary_operands(ctx, x, y, name):
  """Convert weakly-typed operands to the operation's dtype and broadcast a
  rank-0 operand to the full shape: StableHLO wants identical types."""
  ax, ay = ctx.avals_in
  dtype, _ = lax.binary_dtype(name, ax, ay)
  shape = ax.shape or ay.shape
  x = ctx.convert(x, ax, dtype)
  y = ctx.convert(y, ay, dtype)
  x = ctx.broadcast_in_dim(x, ax.update(dtype=dtype), shape, [])
  y = ctx.broadcast_in_dim(y, ay.update(dtype=dtype), shape, [])
  return x, y, ShapedArray(shape, dtype)


def _binary_lowering(op):
  def rule(ctx, x, y):
    x, y, aval = _prepare_binary_operands(ctx, x, y, op)
    return ctx.emit(f"stablehlo.{op} {x}, {y} : {mlir_type(aval)}")
  return rule


def compare_kind(dtype) -> str:
  """How stablehlo.compare reads the bits: FLOAT, SIGNED or UNSIGNED (bool)."""
  kind = np.dtype(dtype).kind
  return "FLOAT" if kind in "fc" else "SIGNED" if kind == "i" else "UNSIGNED"


def _max_lowering(ctx, x, y):
  x, y, aval = _prepare_binary_operands(ctx, x, y, "maximum")
  return ctx.emit(f"stablehlo.maximum {x}, {y} : {mlir_type(aval)}")


def _compare_lowering(direction):
  def rule(ctx, x, y):
    x, y, aval = _prepare_binary_operands(ctx, x, y, direction)
    t = mlir_type(aval)
    return ctx.emit(f"stablehlo.compare {direction}, {x}, {y}, {compare_kind(aval.dtype)} : ({t}, {t}) -> "
                    f"{mlir_type(ctx.avals_out[0])}")
  return rule


def _unary_lowering(op):
  def rule(ctx, x):
    return ctx.emit(f"stablehlo.{op} {x} : {mlir_type(ctx.avals_out[0])}")
  return rule


for _p, _op in _BINARY_OPS.items():
  lowering_rules[_p] = _binary_lowering(_op)
lowering_rules[lax.max_p] = _max_lowering


def _pow_lowering(ctx, x, y):
  ax, ay = ctx.avals_in
  if not lax.integer_exponent(ax, ay):
    return _binary_lowering("power")(ctx, x, y)
  ctx.avals_in = [ax, ay.update(dtype=ax.dtype)]
  return _binary_lowering("power")(ctx, x, ctx.convert(y, ay, ax.dtype))


lowering_rules[lax.pow_p] = _pow_lowering
for _p, _dir in _COMPARISONS.items():
  lowering_rules[_p] = _compare_lowering(_dir)
for _p, _op in _UNARY_OPS.items():
  lowering_rules[_p] = _unary_lowering(_op)


def _sign_lowering(ctx, x):
  """stablehlo.sign takes signed numbers; an unsigned sign is x != 0."""
  (aval,) = ctx.avals_in
  if aval.dtype.kind != "u":
    return _unary_lowering("sign")(ctx, x)
  zero = ctx.broadcast_in_dim(ctx.constant(0, aval.dtype),
                              aval.update(shape=()), aval.shape, [])
  t = mlir_type(aval)
  nonzero = ctx.emit(f"stablehlo.compare NE, {x}, {zero}, UNSIGNED : "
                     f"({t}, {t}) -> {mlir_type(aval.update(dtype=np.bool_))}")
  return ctx.convert(nonzero, aval.update(dtype=np.bool_), aval.dtype)


lowering_rules[lax.sign_p] = _sign_lowering


def _reduce_lowering(ctx, x, axes, op, init):
  """stablehlo.reduce with a region: the body combining two scalars."""
  (aval,), (out,) = ctx.avals_in, ctx.avals_out
  scalar = mlir_type(ShapedArray((), aval.dtype))
  init_val = ctx.constant(init, aval.dtype)
  result = ctx.fresh()
  a, b = ctx.fresh(), ctx.fresh()
  body = ctx.fresh()
  ctx.emit(f"{result} = stablehlo.reduce({x} init: {init_val}) across dimensions = "
           f"{list(axes)} : ({mlir_type(aval)}, {scalar}) -> {mlir_type(out)}\n"
           f"     reducer({a}: {scalar}, {b}: {scalar}) {{\n"
           f"      {body} = stablehlo.{op} {a}, {b} : {scalar}\n"
           f"      stablehlo.return {body} : {scalar}\n"
           f"    }}", result=False)
  return result


def _reduce_sum_lowering(ctx, x, *, axes):
  return _reduce_lowering(ctx, x, axes, "add", 0)


def _reduce_max_lowering(ctx, x, *, axes):
  return _reduce_lowering(ctx, x, axes, "maximum", lax.lowest(ctx.avals_in[0].dtype))


def _reduce_min_lowering(ctx, x, *, axes):
  return _reduce_lowering(ctx, x, axes, "minimum", lax.highest(ctx.avals_in[0].dtype))


def _reduce_prod_lowering(ctx, x, *, axes):
  return _reduce_lowering(ctx, x, axes, "multiply", 1)


lowering_rules[lax.reduce_sum_p] = _reduce_sum_lowering
lowering_rules[lax.reduce_max_p] = _reduce_max_lowering
lowering_rules[lax.reduce_min_p] = _reduce_min_lowering
lowering_rules[lax.reduce_prod_p] = _reduce_prod_lowering


def _broadcast_lowering(ctx, x, *, shape, axes):
  kept = [i for i in range(len(shape)) if i not in axes]   # where x's dims go
  (aval,), (out,) = ctx.avals_in, ctx.avals_out
  return ctx.emit(f"stablehlo.broadcast_in_dim {x}, dims = {kept} : "
                  f"({mlir_type(aval)}) -> {mlir_type(out)}")


def _transpose_lowering(ctx, x, *, permutation):
  (aval,), (out,) = ctx.avals_in, ctx.avals_out
  return ctx.emit(f"stablehlo.transpose {x}, dims = {list(permutation)} : "
                  f"({mlir_type(aval)}) -> {mlir_type(out)}")


def _reshape_lowering(ctx, x, *, new_sizes, out_sharding=None):
  (aval,), (out,) = ctx.avals_in, ctx.avals_out
  return ctx.emit(f"stablehlo.reshape {x} : ({mlir_type(aval)}) -> {mlir_type(out)}")


def _convert_lowering(ctx, x, *, new_dtype, weak_type):
  (aval,), (out,) = ctx.avals_in, ctx.avals_out
  if np.dtype(new_dtype) == np.bool_ and aval.dtype != np.bool_:
    # NumPy's astype(bool) means "is nonzero"; say so explicitly.
    zero = ctx.broadcast_in_dim(ctx.constant(0, aval.dtype), aval.update(shape=()), aval.shape, [])
    t = mlir_type(aval)
    return ctx.emit(f"stablehlo.compare NE, {x}, {zero}, {compare_kind(aval.dtype)} : "
                    f"({t}, {t}) -> {mlir_type(out)}")
  return ctx.emit(f"stablehlo.convert {x} : ({mlir_type(aval)}) -> {mlir_type(out)}")


lowering_rules[lax.broadcast_p] = _broadcast_lowering
lowering_rules[lax.transpose_p] = _transpose_lowering
lowering_rules[lax.reshape_p] = _reshape_lowering
lowering_rules[lax.convert_element_type_p] = _convert_lowering


def _dot_general_lowering(ctx, x, y, *, dimension_numbers, out_sharding=None):
  (lc, rc), (lb, rb) = dimension_numbers
  ax, ay = ctx.avals_in
  dtype, _ = lax.dot_dtype(ax, ay)
  x, y = ctx.convert(x, ax, dtype), ctx.convert(y, ay, dtype)
  batch = f"batching_dims = {list(lb)} x {list(rb)}, " if lb else ""
  return ctx.emit(
      f"stablehlo.dot_general {x}, {y}, {batch}contracting_dims = {list(lc)} x {list(rc)} : "
      f"({mlir_type(ax.update(dtype=dtype))}, {mlir_type(ay.update(dtype=dtype))}) -> "
      f"{mlir_type(ctx.avals_out[0])}")


lowering_rules[lax.dot_general_p] = _dot_general_lowering


# --- Rules of the NumPy-subset primitives ---------------------------------------------------

lowering_rules[lax.stop_gradient_p] = lambda ctx, x: x   # only derivatives see it


def _round_lowering(ctx, x, *, rounding_method):
  op = "round_nearest_even" if rounding_method == lax.ROUND_TO_NEAREST_EVEN else "round_nearest_afz"
  return ctx.emit(f"stablehlo.{op} {x} : {mlir_type(ctx.avals_out[0])}")


def _integer_pow_lowering(ctx, x, *, y):
  """Square-and-multiply: x**13 is x * x**4 * x**8, with 5 multiplications."""
  (aval,) = ctx.avals_in
  t = mlir_type(aval)
  acc, base, n = None, x, abs(y)
  while n:
    if n & 1:
      acc = base if acc is None else ctx.emit(f"stablehlo.multiply {acc}, {base} : {t}")
    n >>= 1
    if n:
      base = ctx.emit(f"stablehlo.multiply {base}, {base} : {t}")
  if acc is None:   # x**0
    acc = ctx.broadcast_in_dim(ctx.constant(1, aval.dtype), aval.update(shape=()), aval.shape, [])
  if y < 0:
    one = ctx.broadcast_in_dim(ctx.constant(1, aval.dtype), aval.update(shape=()), aval.shape, [])
    acc = ctx.emit(f"stablehlo.divide {one}, {acc} : {t}")
  return acc


lowering_rules[lax.round_p] = _round_lowering
lowering_rules[lax.integer_pow_p] = _integer_pow_lowering


def _arg_reduce_lowering(pick):
  """argmax/argmin as three plain ops: the extreme value, a mask of where it
  is (or of NaNs, which win as in NumPy), and the smallest index under it."""
  def rule(ctx, x, *, axes, index_dtype):
    (aval,), (out,) = ctx.avals_in, ctx.avals_out
    t, it = mlir_type(aval), mlir_type(ShapedArray(aval.shape, index_dtype))
    mask_t = mlir_type(ShapedArray(aval.shape, np.bool_))
    extreme = (lax.lowest if pick == "maximum" else lax.highest)(aval.dtype)
    ctx.avals_out = [aval.update(shape=out.shape)]
    best = ctx.broadcast_in_dim(_reduce_lowering(ctx, x, axes, pick, extreme), ctx.avals_out[0],
                                aval.shape, [i for i in range(aval.ndim) if i not in axes])
    kind = compare_kind(aval.dtype)
    at_best = ctx.emit(f"stablehlo.compare EQ, {x}, {best}, {kind} : ({t}, {t}) -> {mask_t}")
    if aval.dtype.kind in "fc":
      nan = ctx.emit(f"stablehlo.compare NE, {x}, {x}, FLOAT : ({t}, {t}) -> {mask_t}")
      at_best = ctx.emit(f"stablehlo.or {at_best}, {nan} : {mask_t}")
    iota = ctx.emit(f"stablehlo.iota dim = {axes[0]} : {it}")
    big = ctx.broadcast_in_dim(ctx.constant(aval.shape[axes[0]], index_dtype),
                               ShapedArray((), index_dtype), aval.shape, [])
    idx = ctx.emit(f"stablehlo.select {at_best}, {iota}, {big} : {mask_t}, {it}")
    ctx.avals_in, ctx.avals_out = [ShapedArray(aval.shape, index_dtype)], [out]
    return _reduce_lowering(ctx, idx, axes, "minimum", lax.highest(index_dtype))
  return rule


lowering_rules[lax.argmax_p] = _arg_reduce_lowering("maximum")
lowering_rules[lax.argmin_p] = _arg_reduce_lowering("minimum")


def _cumsum_lowering(ctx, x, *, axis, reverse):
  """A window as long as the axis slides along it: each output sums the
  elements up to its own (padding with zeros on the side it comes from)."""
  (aval,), (out,) = ctx.avals_in, ctx.avals_out
  n, rank = aval.shape[axis], aval.ndim
  if n < 2 or aval.size == 0:   # nothing to sum (and XLA wants windows of
    return x                     # size > 0)
  scalar = mlir_type(ShapedArray((), aval.dtype))
  zero = ctx.constant(0, aval.dtype)
  window = [n if i == axis else 1 for i in range(rank)]
  pads = [([0, n - 1] if reverse else [n - 1, 0]) if i == axis else [0, 0] for i in range(rank)]
  pads_t = f"tensor<{rank}x2xi64>"
  ones = ", ".join(["1"] * rank)
  result, a, b, body = ctx.fresh(), ctx.fresh(), ctx.fresh(), ctx.fresh()
  ctx.emit(f'{result} = "stablehlo.reduce_window"({x}, {zero}) <{{'
           f"window_dimensions = array<i64: {', '.join(map(str, window))}>, "
           f"window_strides = array<i64: {ones}>, padding = dense<{pads}> : {pads_t}}}> ({{\n"
           f"    ^bb0({a}: {scalar}, {b}: {scalar}):\n"
           f"      {body} = stablehlo.add {a}, {b} : {scalar}\n"
           f"      stablehlo.return {body} : {scalar}\n"
           f"    }}) : ({mlir_type(aval)}, {scalar}) -> {mlir_type(out)}", result=False)
  return result


lowering_rules[lax.cumsum_p] = _cumsum_lowering


def _concatenate_lowering(ctx, *xs, dimension):
  ins = ", ".join(mlir_type(a) for a in ctx.avals_in)
  return ctx.emit(f"stablehlo.concatenate {', '.join(xs)}, dim = {dimension} : ({ins}) -> "
                  f"{mlir_type(ctx.avals_out[0])}")


def _pad_lowering(ctx, x, value, *, padding_config):
  (ax, av), (out,) = ctx.avals_in, ctx.avals_out
  value, av = ctx.convert(value, av, ax.dtype), av.update(dtype=ax.dtype)
  lo, hi, mid = ([c[i] for c in padding_config] for i in range(3))
  return ctx.emit(f"stablehlo.pad {x}, {value}, low = {lo}, high = {hi}, interior = {mid} : "
                  f"({mlir_type(ax)}, {mlir_type(av)}) -> {mlir_type(out)}")


def _slice_lowering(ctx, x, *, start_indices, limit_indices, strides):
  spans = ", ".join(f"{a}:{b}:{s}" for a, b, s in zip(start_indices, limit_indices, strides))
  return ctx.emit(f"stablehlo.slice {x} [{spans}] : ({mlir_type(ctx.avals_in[0])}) -> "
                  f"{mlir_type(ctx.avals_out[0])}")


def _rev_lowering(ctx, x, *, dimensions):
  return ctx.emit(f"stablehlo.reverse {x}, dims = {list(dimensions)} : "
                  f"{mlir_type(ctx.avals_out[0])}")


def _dynamic_slice_lowering(ctx, x, *starts, slice_sizes):
  ins = ", ".join(mlir_type(a) for a in ctx.avals_in)
  return ctx.emit(f"stablehlo.dynamic_slice {x}, {', '.join(starts)}, sizes = "
                  f"{list(slice_sizes)} : ({ins}) -> {mlir_type(ctx.avals_out[0])}")


def _dynamic_update_slice_lowering(ctx, x, update, *starts):
  ins = ", ".join(mlir_type(a) for a in ctx.avals_in)
  return ctx.emit(f"stablehlo.dynamic_update_slice {x}, {update}, {', '.join(starts)} : "
                  f"({ins}) -> {mlir_type(ctx.avals_out[0])}")


lowering_rules[lax.concatenate_p] = _concatenate_lowering
lowering_rules[lax.pad_p] = _pad_lowering
lowering_rules[lax.slice_p] = _slice_lowering
lowering_rules[lax.rev_p] = _rev_lowering
lowering_rules[lax.dynamic_slice_p] = _dynamic_slice_lowering
lowering_rules[lax.dynamic_update_slice_p] = _dynamic_update_slice_lowering


# --- Rules of select_n and clamp ---------------------------------------------------------------

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


def _clamp_lowering(ctx, lo, x, hi):
  alo, ax, ahi = ctx.avals_in
  lo, hi = ctx.convert(lo, alo, ax.dtype), ctx.convert(hi, ahi, ax.dtype)
  alo, ahi = alo.update(dtype=ax.dtype), ahi.update(dtype=ax.dtype)
  return ctx.emit(f"stablehlo.clamp {lo}, {x}, {hi} : ({mlir_type(alo)}, {mlir_type(ax)}, "
                  f"{mlir_type(ahi)}) -> {mlir_type(ctx.avals_out[0])}")


lowering_rules[lax.select_n_p] = _select_n_lowering
lowering_rules[lax.clamp_p] = _clamp_lowering
lowering_rules[lax.reshard_p] = lambda ctx, x, *, sharding: x   # (lower_jaxpr_body adds the constraint)
