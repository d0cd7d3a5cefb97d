"""The core: primitives, rule tables, abstract values, tracers and the interpreter stack.

Everything a transformation needs to take part in `bind` lives here. The
transformations themselves (ad.py, batching.py, ...) are just `Trace`
subclasses plus rule tables.
"""
from __future__ import annotations

import linecache
import operator
import os
import sys
from contextlib import contextmanager
from typing import Any, Callable, NamedTuple, Optional

import numpy as np

from . import dtypes


# --- Primitives and their rule tables ----------------------------------------

class Primitive:
  """An atomic operation. Transformations interpret it through rule tables.

  User code calls thin wrappers (`autodidax.lax.sin`) that call `bind`; the
  interpreters decide what a `bind` means. A new primitive fills the same
  tables the built-in primitives use, each the same way, `table[prim] = rule`:

      multiply_add_p = Primitive("multiply_add")   # multiple_results=False
      def multiply_add(x, y, z):                   # operands positional,
        return multiply_add_p.bind(x, y, z)        # static params as keywords

      core.impl_rules[multiply_add_p] = impl       # impl(x, y, z) on arrays
      core.abstract_eval_rules[multiply_add_p] = aeval  # aeval(ShapedArray, ...)
      ad.jvp_rules[multiply_add_p] = jvp           # jvp(primals, tangents)
      ad.transpose_rules[multiply_add_p] = transpose  # (ct, *UndefPrimal|value)
      batching.vmap_rules[multiply_add_p] = batch  # (axis_size, vals, dims)
      lowering.lowering_rules[multiply_add_p] = lower  # (ctx, *ssa_names)

  JAX spells three of these `multiply_add_p.def_impl(impl)`,
  `multiply_add_p.def_abstract_eval(aeval)` and
  `mlir.register_lowering(multiply_add_p, lower)`; those spellings work here too.

  Each rule is needed only by the transformations that use it: eager
  evaluation needs the impl; `jit` and `make_jaxpr` the abstract eval; `jit`
  also the lowering; `jvp` the JVP rule; `grad` and `vjp` the JVP rule and a
  transpose rule for every primitive the JVP rule applies to the tangents;
  `vmap` the batching rule. A missing one raises `MissingRuleError`, e.g.
  "JVP rule for 'multiply_add' not implemented". With `multiple_results=True`
  `bind` returns a list and every rule takes and returns lists of outputs.
  """
  multiple_results = False

  def __init__(self, name: str, *, multiple_results: bool = False):
    self.name = name
    self.multiple_results = multiple_results

  def __repr__(self):
    return self.name

  def bind(self, *args, **params):
    outs = hooks.bind(self, args, params)   # `bind` below, or a hook
    return outs if self.multiple_results else outs[0]

  # JAX's spellings of `impl_rules[prim] = rule` and `abstract_eval_rules[...]`.
  def def_impl(self, rule):
    impl_rules[self] = rule
    return rule

  def def_abstract_eval(self, rule):
    abstract_eval_rules[self] = rule
    return rule


class MissingRuleError(NotImplementedError):
  """A primitive has no rule for the transformation being applied."""


class RuleTable(dict):
  """Rules for one transformation, keyed by primitive.

  A missing rule raises an error naming the rule and the primitive.
  `override` swaps a rule for the duration of a `with` block (exercises use it).
  """

  def __init__(self, kind: str, hint: str = ""):
    super().__init__()
    self.kind, self.hint = kind, hint

  def __missing__(self, prim):
    name = getattr(prim, "name", prim)
    raise MissingRuleError(f"{self.kind} rule for '{name}' not implemented."
                           + (f" {self.hint}" if self.hint else ""))

  def __repr__(self):
    return f"<{self.kind} rules for {sorted(p.name for p in self)}>"

  @contextmanager
  def override(self, prim: Primitive, rule: Callable):
    had, old = prim in self, self.get(prim)
    self[prim] = rule
    try:
      yield rule
    finally:
      if had:
        self[prim] = old
      else:
        del self[prim]


impl_rules = RuleTable(
    "Evaluation", "Register one with `core.impl_rules[prim] = rule` "
    "(or, as in JAX, `prim.def_impl(rule)`).")
abstract_eval_rules = RuleTable(
    "Abstract evaluation", "Register one with `core.abstract_eval_rules[prim] = rule` "
    "(or, as in JAX, `prim.def_abstract_eval(rule)`).")


sharding_rules = RuleTable(
    "Sharding", "Register one with `core.sharding_rules[prim] = rule`: "
    "rule(*avals, **params) returns the output's PartitionSpec (a list of them "
    "for several outputs), computed from the operands' `aval.sharding.spec`.")


def abstract_eval(prim: Primitive, avals, params):
  """The output type(s) of `prim`: its abstract eval rule's, and where an
  operand's type has a sharding (a mesh with Explicit axes) or varies over
  manual axes (inside shard_map), those of the output, from the primitive's
  sharding rule and vma rule. Every staging interpreter calls this."""
  out = abstract_eval_rules[prim](*avals, **params)
  for a in avals:   # (a Ref's type has neither: its reads and writes keep their values')
    if getattr(a, "sharding", None) is not None or getattr(a, "vma", None):
      return types_hook(prim, avals, params, out)
  if prim in vma_rules:   # a collective may vary more than its operands
    return types_hook(prim, avals, params, out)
  return out


types_hook = None   # set by autodidax.sharding_rules
# rule(vmas, **params) -> the output's vma, for the primitives whose output
# doesn't vary over the union of their operands' (collectives: autodidax.shard_map)
vma_rules: dict = {}


# --- Abstract values ----------------------------------------------------------

_keep = object()   # update(): leave this field as it is

_DTYPE_SHORT = {"float16": "f16", "float32": "f32", "float64": "f64",
                "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
                "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
                "complex64": "c64", "complex128": "c128", "bool": "bool"}


def dtype_short(dtype) -> str:
  return _DTYPE_SHORT.get(np.dtype(dtype).name, np.dtype(dtype).name)


# The order of a mesh's axes, for printing a type's varying axes as JAX does
# (`{V:(data,model)}`, in mesh order): shard_map pushes its mesh's names while it
# traces its body, and the jaxpr printer while it prints one.
_mesh_axis_orders: list = []


@contextmanager
def mesh_axis_order(names):
  _mesh_axis_orders.append(tuple(names))
  try:
    yield
  finally:
    _mesh_axis_orders.pop()


def order_wrt_mesh(axes, known=None) -> list:
  """`axes` in the innermost mesh's order; else in the `known` order; else sorted."""
  for order in reversed(_mesh_axis_orders):
    if set(axes) <= set(order):
      return [a for a in order if a in axes]
  return list(known) if known is not None else sorted(axes)


class ShapedArray:
  """The set of all arrays with a given shape and dtype.

  `weak_type` marks values that came from Python scalars: like JAX, they adopt
  the dtype of the array they meet (`x * 2.` keeps x's float32). `sharding`
  (a NamedSharding, or None) is where an array on a mesh with Explicit axes
  lives: part of its type, printed `f32[16@data,4]`. Inside shard_map, `vma`
  is the set of mesh axes along which the value varies from device to
  device, printed `f32[2,4]{V:data}` (both: the chapter Many devices).
  """

  def __init__(self, shape, dtype, weak_type: bool = False, sharding=None,
               vma=frozenset()):
    self.shape = tuple(shape)
    self.dtype = np.dtype(dtype)
    self.weak_type = weak_type
    self.sharding, self.vma = sharding, vma
    if vma:   # its order, to print it later
      self.vma_order = tuple(order_wrt_mesh(vma))
    if self.dtype not in dtypes.SUPPORTED:   # e.g. bfloat16: NumPy has none
      raise dtypes.unsupported(self.dtype)

  vma_order = None
  ndim = property(lambda self: len(self.shape))
  size = property(lambda self: int(np.prod(self.shape, dtype=int)))

  def str_short(self, short_dtypes: bool = True) -> str:
    """`f32[16@data,4]` as in jaxprs; with short_dtypes=False, `float32[16@data,4]`."""
    dims = list(map(str, self.shape))
    if self.sharding is not None:   # `16@data`: the mesh axes splitting a dimension
      for d, axes in enumerate(self.sharding.spec.normalized(self.ndim)):
        if axes:
          dims[d] += "@" + (axes[0] if len(axes) == 1 else f"({','.join(axes)})")
    vma = order_wrt_mesh(self.vma, self.vma_order)
    vma = "" if not vma else "{V:" + (vma[0] if len(vma) == 1 else f"({','.join(vma)})") + "}"
    dtype = dtype_short(self.dtype) if short_dtypes else self.dtype.name
    return f"{dtype}[{','.join(dims)}]{vma}"

  def update(self, shape=None, dtype=None, weak_type=None, sharding=_keep,
             vma=None) -> "ShapedArray":
    return ShapedArray(self.shape if shape is None else shape,
                       self.dtype if dtype is None else dtype,
                       self.weak_type if weak_type is None else weak_type,
                       self.sharding if sharding is _keep else sharding,
                       self.vma if vma is None else frozenset(vma))

  def _bool(self, tracer):
    raise ConcretizationError(tracer)

  def __hash__(self):
    return hash((self.shape, self.dtype, self.weak_type, self.sharding, self.vma))

  def __eq__(self, other):
    return (isinstance(other, ShapedArray) and self.shape == other.shape
            and self.dtype == other.dtype and self.weak_type == other.weak_type
            and self.sharding == other.sharding and self.vma == other.vma)

  def __str__(self):   # as JAX's: `float32[16@data,4]`, `~float32[]` when weak
    return ("~" if self.weak_type else "") + self.str_short(short_dtypes=False)

  def __repr__(self):
    weak = ", weak_type=True" if self.weak_type else ""
    return f"ShapedArray({self.str_short(short_dtypes=False)}{weak})"


class ConcreteArray(ShapedArray):
  """The singleton set holding one known array."""

  def __init__(self, val):
    # A Python int or float is weakly typed; a bool never is, as in JAX.
    weak = (type(val) is int or type(val) is float
            or getattr(val, "weak_type", False))
    self.shape, self.weak_type = np.shape(val), weak
    self.dtype = dtypes.check(np.result_type(val))
    self.sharding, self.vma = getattr(getattr(val, "aval", None), "sharding", None), frozenset()
    self.val = val

  def _bool(self, tracer):
    return bool(self.val)

  def __repr__(self):
    return f"ConcreteArray({self.str_short()}, {np.asarray(self.val)!r})"

  __hash__ = ShapedArray.__hash__   # a set with one element is still that shape
  __eq__ = ShapedArray.__eq__


def raise_to_shaped(aval: ShapedArray) -> ShapedArray:
  if not isinstance(aval, ShapedArray):   # another kind of type (a Ref's) is kept
    return aval
  return ShapedArray(aval.shape, aval.dtype, aval.weak_type, aval.sharding, aval.vma)


# Types that are arrays for us, besides Tracers. Later parts add device arrays.
array_types: set = {bool, int, float, np.ndarray, np.bool_, np.float16,
                    np.float32, np.float64, np.int8, np.int16, np.int32,
                    np.int64, np.uint8, np.uint16, np.uint32, np.uint64}


# `aval_rules[type](x)`: the type of a value that is not an array (a Ref).
aval_rules: dict = {}


def is_array(x) -> bool:
  return type(x) in array_types or isinstance(x, Tracer)


def get_aval(x) -> ShapedArray:
  if isinstance(x, Tracer):
    return x.aval
  rule = aval_rules.get(type(x))
  if rule is not None:
    return rule(x)
  if type(x) in array_types:
    return ConcreteArray(x)
  raise UnsupportedTypeError(x)


# --- Errors a learner can cause -------------------------------------------------

class UnsupportedTypeError(TypeError):
  def __init__(self, x):
    if type(x).__name__ == "Zero":   # ad.Zero, a symbolic zero
      return super().__init__(
          f"An operation got a symbolic zero ({x!r}), which is not an array: a rule "
          "passed a Zero tangent or cotangent on to an operation. Skip the operation "
          "(its result is zero too), or make the Zero an array with "
          "ad.instantiate_zeros first.")
    super().__init__(
        f"autodidax can't treat a value of type {type(x).__name__} as an array: "
        f"{x!r:.80}. Pass numpy arrays or Python scalars (bool/int/float), or "
        "pytrees (tuples, lists, dicts) of them; mark other arguments static.")


class ConcretizationError(TypeError):
  """Python needs a concrete value (for `if`, `int()`...) that a tracer
  doesn't have here (JAX's ConcretizationTypeError)."""

  def __init__(self, tracer, what: str = "a bool or an index"):
    trace = type(tracer._trace).__name__
    super().__init__(
        f"A tracer (a value traced by {trace}) has no concrete value here (it is "
        f"{tracer.aval.str_short()}), so Python can't turn it into {what}, as "
        "`if x > 0:`, `while` or float(x) would need. Stage the choice with "
        "lax.cond or lax.while_loop, or compute both branches and blend them "
        "with a mask (m * a + (1 - m) * b, with m = (x > 0).astype(x.dtype)); "
        "change dtypes with x.astype; or keep the value out of the "
        "transformation (vmap: in_axes=None).")


class EscapedTracerError(RuntimeError):
  pass


class NoCurrentTraceError(AttributeError):
  """A tracer of JAX today's design (autodidax.stackless) met the level-based
  `bind` of Parts 1-4, which asks its trace for a level (`.main`)."""

  def __init__(self, trace):
    super().__init__(
        f"An operation on a tracer of {trace!r} ran while no trace was current, so it "
        "went to Parts 1-4's level-based `bind`, which doesn't know traces without "
        "levels. Run the code that operates on the tracers inside "
        "`with sl.set_current_trace(trace):`, as a transformation does when it calls "
        "its function.")


class TracerArrayConversionError(TypeError):
  """A tracer reached NumPy: the message says where, and so whose doing it was."""

  def __init__(self, tracer):
    code, in_library = _numpy_caller()
    if not in_library:
      why = ("Inside a transformed function use autodidax.numpy (imported as `anp` in "
             "the course) instead of numpy.")
    elif hasattr(tracer._trace, "parent"):   # a trace of JAX today's design (stackless)
      why = ("The evaluator was given a traced value, so an operation ran while the "
             "evaluator was the current trace: a rule must run its own operations with "
             "its trace's parent current (`with sl.set_current_trace(self.parent):`), and "
             "a transformation must call its function with its own trace current.")
    else:
      why = ("An impl rule was given a traced value: code that handles tracers must bind "
             "primitives (autodidax.lax), not call impl rules or NumPy on them.")
    super().__init__(f"A tracer ({tracer}) reached NumPy {code}. {why}")


def _numpy_caller() -> tuple[str, bool]:
  """Where the code that handed a tracer to NumPy is (the first frame outside
  NumPy and this module's error path), and whether it is in this library."""
  numpy_dir = os.path.dirname(np.__file__) + os.sep
  here = os.path.dirname(os.path.abspath(__file__)) + os.sep
  frame = sys._getframe(1)
  while frame is not None and (frame.f_code.co_filename.startswith(numpy_dir) or
                               frame.f_code.co_name in ("__init__", "__array__", "_numpy_caller")
                               and frame.f_code.co_filename == __file__):
    frame = frame.f_back
  if frame is None:
    return "", False
  file, line, name = frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name
  text = linecache.getline(file, line).strip()
  in_library = os.path.abspath(file).startswith(here)
  if in_library:
    file = "autodidax/" + os.path.relpath(file, here)
  elif "ipykernel_" in file or file.startswith("<"):
    file = "your cell"   # a notebook cell's code has no file of its own
  place = f"in {name}() ({file}, line {line})" if name != "<module>" else f"at {file}, line {line}"
  return place + (f": `{text}`" if text else ""), in_library


def check_live(main: "MainTrace"):
  """Raise if `main` has finished: one of its tracers escaped and is used."""
  if main.level >= len(trace_stack) or trace_stack[main.level] is not main:
    raise EscapedTracerError(
        f"Encountered an escaped tracer of a {main.trace_type.__name__} "
        "transformation that has already finished (was it saved to a global "
        "or an outer variable?). Return values from transformed functions "
        "instead.")


# --- Tracers and traces -----------------------------------------------------------

class MainTrace(NamedTuple):
  """One interpreter on the stack: its height, its Trace type and its data."""
  level: int
  trace_type: type
  global_data: Any

  def __repr__(self):
    data = "" if self.global_data is None else f", data={self.global_data!r:.40}"
    return f"MainTrace(level={self.level}, {self.trace_type.__name__}{data})"

  # Each interpreter is its own: a finished one never equals a live one.
  __eq__, __ne__, __hash__ = object.__eq__, object.__ne__, object.__hash__


class Trace:
  """An interpreter: how to box values, and how to apply a primitive to boxes."""

  def __init__(self, main: MainTrace):
    self.main = main

  def pure(self, val):   # box a constant (not a Tracer)
    raise NotImplementedError

  def lift(self, val):   # box a Tracer of a lower level
    raise NotImplementedError

  def process_primitive(self, primitive, tracers, params):
    raise NotImplementedError

  def __repr__(self):
    main = self.main
    live = main.level < len(trace_stack) and trace_stack[main.level] is main
    return f"{type(self).__name__}(level={main.level}{'' if live else ', finished'})"


def aval_property(field: str) -> property:
  """A read-only attribute read from `self.aval` (a tracer's shape, dtype, ...)."""
  return property(operator.attrgetter(f"aval.{field}"))


class Tracer:
  """A boxed value flowing through a function under transformation.

  Each Tracer knows its Trace and its abstract value; arithmetic operators are
  installed by `autodidax.numpy` so that they bind primitives.
  """
  __array_priority__ = 1000
  __slots__ = ["_trace"]

  @property
  def aval(self) -> ShapedArray:
    raise NotImplementedError

  shape, dtype, ndim, size = map(aval_property, ("shape", "dtype", "ndim", "size"))

  def full_lower(self):   # the default: keep the box
    return self

  def __bool__(self):
    return self.aval._bool(self)

  def __len__(self):
    if not self.shape:
      raise TypeError("len() of a 0-d (scalar) tracer")
    return self.shape[0]

  def _concrete(self, what: str):
    """The value, where the interpreter knows it (e.g. under grad or jvp)."""
    if isinstance(self.aval, ConcreteArray):
      return np.asarray(self.aval.val)
    raise ConcretizationError(self, what)

  def _never(self, what: str):
    """As JAX: float(), complex() and .tolist() never read a known value."""
    raise ConcretizationError(self, what)

  __int__ = lambda self: int(self._concrete("a Python int"))
  __float__ = lambda self: self._never("a Python float")
  __complex__ = lambda self: self._never("a Python complex")
  __index__ = lambda self: operator.index(self._concrete("an index")[()])
  item = lambda self: self._concrete("a Python scalar (.item())").item()
  tolist = lambda self: self._never("a Python list (.tolist())")

  def __array__(self, dtype=None, copy=None):
    raise TracerArrayConversionError(self)

  def __repr__(self):
    return f"Traced<{self.aval.str_short()}>with<{self._trace}>"


# --- The interpreter stack ---------------------------------------------------------

trace_stack: list[MainTrace] = []
dynamic_trace: Optional[MainTrace] = None   # omnistaging; see Part 2


@contextmanager
def new_main(trace_type: type, global_data=None):
  """Push an interpreter for the duration of a transformation.

  The stack is restored on the way out, whatever happens inside, so a failing
  transformation never leaves a stale interpreter behind.
  """
  level = len(trace_stack)
  main = MainTrace(level, trace_type, global_data)
  trace_stack.append(main)
  try:
    yield main
  finally:
    del trace_stack[level:]


@contextmanager
def new_dynamic(main: MainTrace):
  """Make `main` the dynamic trace: it sees every bind, data-dependent or not."""
  global dynamic_trace
  prev, dynamic_trace = dynamic_trace, main
  try:
    yield
  finally:
    dynamic_trace = prev


# Set by autodidax.parallel: `named_axis_hook(prim, args, params) -> args`
# boxes the operands of a higher-order primitive whose jaxprs use a named
# vmap's axis for that vmap, when it sits above them, as a collective's own
# bind does: then the vmap's rule batches the jaxprs under its name.
named_axis_hook = None

# Set by autodidax.state: `ref_box_hook(prim, trace, args, params) -> outs or
# None`. A loop, cond or call whose body closes over a box (a type in
# `box_types`: a Ref made outside staging) is bound with the box's value
# instead, while a transformation runs; None: bind as usual.
ref_box_hook = None
box_types: set = set()


def bind(prim: Primitive, *args, **params) -> list:
  """Apply `prim`: the top interpreter among the arguments handles it."""
  if named_axis_hook is not None and len(trace_stack) > 1:
    args = named_axis_hook(prim, args, params)
  trace = find_top_trace(args)
  if ref_box_hook is not None and any(type(x) in box_types for x in args):
    outs = ref_box_hook(prim, trace, args, params)
    if outs is not None:
      return outs
  outs = trace.process_primitive(prim, [full_raise(trace, x) for x in args], params)
  return [full_lower(y) for y in outs]


def find_top_trace(xs) -> Trace:
  """The highest-level interpreter that boxed any of `xs` (else the bottom one)."""
  main = trace_stack[0]
  for x in xs:
    if isinstance(x, Tracer) and x._trace.main.level > main.level:
      main = x._trace.main
  if dynamic_trace is not None and dynamic_trace.level > main.level:
    main = dynamic_trace
  check_live(main)   # a tracer whose transformation has finished can't lead
  return main.trace_type(main)


def full_raise(trace: Trace, val) -> Tracer:
  """Box `val` for `trace`: `pure` for constants, `lift` for lower tracers."""
  if isinstance(val, Tracer):
    here, there = trace.main, val._trace.main
    if there is here:
      return val
    if there not in trace_stack:
      raise EscapedTracerError(
          f"Encountered an escaped tracer {val}: it belongs to a transformation "
          "that has already finished (was it saved to a global or an outer "
          "variable?). Return values from transformed functions instead.")
    if there.level < here.level:
      return trace.lift(val)
    if there.level > here.level:
      raise EscapedTracerError(
          f"Can't lift a tracer from level {there.level} "
          f"({there.trace_type.__name__}) to the lower level {here.level} "
          f"({here.trace_type.__name__}): a value from an inner "
          "transformation leaked into an outer one.")
    raise EscapedTracerError(
        f"Different traces at the same level: {val._trace} and {trace}.")
  if type(val) not in array_types:
    raise UnsupportedTypeError(val)
  return trace.pure(val)


def full_lower(val):
  """Unbox `val` as far as its interpreter allows (an optimization)."""
  return val.full_lower() if isinstance(val, Tracer) else val


# --- The evaluation interpreter, at the bottom of the stack --------------------------

class EvalTrace(Trace):
  """Standard evaluation: apply each primitive's impl rule to plain arrays."""

  def pure(self, x):
    return x
  lift = pure

  def process_primitive(self, primitive, tracers, params):
    out = impl_rules[primitive](*tracers, **params)
    return out if primitive.multiple_results else [out]


trace_stack.append(MainTrace(0, EvalTrace, None))


# --- Hooks: all that may take a bind besides `bind` -------------------------
# Parts 1-4 need only `bind` above. `Primitive.bind` calls `hooks.bind`, which
# adds the three things below; none of them changes a result.

class Design:
  """A way to route binds to interpreters, with the entry points through
  which the rules of higher-order primitives (control flow, jit) stage and
  transform functions. Those rules call the running design's entry points
  (`current_design()`), not one design's interpreters, so each rule is
  written once and serves both designs:

    bind(prim, args, params) -> outs             route one bind
    trace_to_jaxpr(f, in_avals) -> jaxpr, consts  stage f (flat in, flat out)
    jvp(f, primals, tangents) -> outs, tangents   flat; Zero tangents stay Zero
    vmap(f, in_dims, *args) -> outs, dims, size   flat; not_mapped: unbatched

  `levels` is Parts 1-4's interpreter stack; partial_eval, ad and batching
  fill in its entry points. autodidax.stackless makes the other design,
  which routes by the current trace (the chapter "JAX today")."""

  def __init__(self, name: str, bind=None, trace_to_jaxpr=None, jvp=None,
               vmap=None):
    self.name, self.bind = name, bind
    self.trace_to_jaxpr, self.jvp, self.vmap = trace_to_jaxpr, jvp, vmap

  def __repr__(self):
    return f"Design({self.name!r})"


_bind_by_levels = bind   # `bind` above, whatever name `core.bind` points to


def _bind_via_hooks(prim: Primitive, *args, **params) -> list:
  return hooks.bind(prim, args, params)


levels = Design("levels", bind=lambda prim, args, params:
                _bind_by_levels(prim, *args, **params))


class BindEvent:
  """One `bind`: which interpreter handled it, with what, at what nesting depth."""
  __slots__ = ("prim", "main", "args", "params", "outs", "depth", "stack")

  def __init__(self, prim, main, args, params, depth, stack):
    self.prim, self.main, self.args, self.params = prim, main, args, params
    self.depth, self.stack, self.outs = depth, stack, None

  def __repr__(self):
    return (f"{'  ' * self.depth}{self.prim.name} handled by "
            f"{self.main.trace_type.__name__} (level {self.main.level})")


class BindHooks:
  """What may take a bind before `bind` does, in the order it is asked:

  1. the design: while autodidax.stackless runs a transformation, its design
     routes every bind, by the current trace instead of by levels (`routing`);
  2. observers, told of each bind as it starts (a `BindEvent`, whose `outs`
     are filled in when it returns): viz's recordings and the exercises'
     counts of binds (`observing`);
  3. the fast path: with plain arrays only and no dynamic trace, `bind` would
     pick EvalTrace, whose whole work is the impl rule, so call that directly.
     Eager code binds thousands of times. Where one of them is an array on
     many devices (a type in `mesh_array_types`), `mesh_bind` runs the
     primitive as a program on their devices instead, so that the result
     keeps a layout as in JAX (autodidax.spmd sets it).

  While a hook (1 or 2) is on, `core.bind` itself goes through the hooks as
  well, so interpreters that call it directly (Part 2's eval_jaxpr) are
  routed and observed like `Primitive.bind`.
  """

  def __init__(self):
    self.design: Design = levels
    self.observers: list = []
    self.depth = 0   # how deeply the observed binds are nested

  def bind(self, prim: Primitive, args, params) -> list:
    if self.design is not levels:
      return self.design.bind(prim, args, params)
    if self.observers:
      return self._observed(prim, args, params)
    if dynamic_trace is None and (named_axis_hook is None or len(trace_stack) == 1):
      on_mesh = False
      for x in args:
        t = type(x)
        if t not in array_types:
          break
        on_mesh = on_mesh or t in mesh_array_types
      else:
        if on_mesh:
          return mesh_bind(prim, args, params)
        out = impl_rules[prim](*args, **params)
        return out if prim.multiple_results else [out]
    return _bind_by_levels(prim, *args, **params)

  def quiet(self) -> bool:
    """No hook is on and nothing is staged: a bind of plain arrays would
    only run its impl rule (jit's fast path asks this too)."""
    return (self.design is levels and not self.observers
            and dynamic_trace is None)

  def _observed(self, prim, args, params) -> list:
    event = BindEvent(prim, find_top_trace(args).main, args, params,
                      self.depth, tuple(trace_stack))
    for observe in list(self.observers):
      observe(event)
    self.depth += 1
    try:
      event.outs = _bind_by_levels(prim, *args, **params)
    finally:
      self.depth -= 1
    return event.outs

  @contextmanager
  def observing(self, callback: Callable):
    """Call `callback(event)` as each bind starts, for the `with` block."""
    self.observers.append(callback)
    self._route_core_bind()
    try:
      yield
    finally:
      self.observers.remove(callback)
      self._route_core_bind()

  @contextmanager
  def routing(self, design: Design):
    """Let `design` route every bind for the `with` block."""
    prev, self.design = self.design, design
    if prev is not design:
      self._route_core_bind()
    try:
      yield design
    finally:
      self.design = prev
      if prev is not design:
        self._route_core_bind()

  def _route_core_bind(self):
    global bind
    hooked = self.observers or self.design is not levels
    bind = _bind_via_hooks if hooked else _bind_by_levels


hooks = BindHooks()
mesh_array_types: set = set()   # arrays on many devices (autodidax.sharding)
mesh_bind = None   # mesh_bind(prim, args, params) -> outs (autodidax.spmd)


def current_design() -> Design:
  """The design that routes binds now: `levels`, unless stackless runs."""
  return hooks.design


def observe_binds(callback: Callable):
  """`with observe_binds(f):` calls `f(event)` (a BindEvent) as each bind
  starts."""
  return hooks.observing(callback)
