"""Random straight-line programs, run through autodidax's transformations and
through JAX's, which must agree: jvp, vmap, their compositions, jacfwd, and
jvp against finite differences.

A program is a list of ops over a few input arrays. The same program is
interpreted twice: with autodidax.numpy/autodidax.lax ("ours") and with
jax.numpy/jax.lax ("theirs"). Ops keep values in safe domains (log of x*x+1,
division by y*y+1, exp of tanh) so every program is defined and smooth almost
everywhere.
"""
import itertools
from types import SimpleNamespace
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

import autodidax as adx
import autodidax.numpy as anp
from autodidax import lax

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:jax.*")

B = 2            # batch size of the vmap tests
MAX_SIZE = 24    # elements per intermediate value
MAX_RANK = 3


def _lax_broadcast_ours(x, shape, axes):
  return lax.broadcast(x, shape, axes)


def _lax_broadcast_theirs(x, shape, axes):
  kept = [i for i in range(len(shape)) if i not in axes]
  return jax.lax.broadcast_in_dim(x, shape, kept)


def _lax_operands_theirs(x, y):
  # autodidax.lax lets a Python scalar take the array's dtype, as NumPy does;
  # jax.lax wants equal dtypes, so the JAX side converts the scalar explicitly.
  if type(x) in (int, float):
    x = jnp.asarray(x, jnp.result_type(y))
  if type(y) in (int, float):
    y = jnp.asarray(y, jnp.result_type(x))
  return x, y


OURS = SimpleNamespace(np=anp, lax=lax, broadcast=_lax_broadcast_ours,
                       lax_operands=lambda x, y: (x, y))
THEIRS = SimpleNamespace(np=jnp, lax=jax.lax, broadcast=_lax_broadcast_theirs,
                         lax_operands=_lax_operands_theirs)


# --- The ops: how to apply each, with either backend ------------------------------------

def apply_op(bk, name, params, args):
  np_, lax_ = bk.np, bk.lax
  if name in ("sin", "cos", "tanh", "negative"):
    return getattr(np_, name)(args[0])
  if name == "exp_tanh":
    return np_.exp(np_.tanh(args[0]))
  if name == "log_sq":
    return np_.log(np_.add(np_.multiply(args[0], args[0]), 1.0))
  if name in ("add", "subtract", "multiply", "maximum"):
    return getattr(np_, name)(*args)
  if name == "div_safe":
    x, y = args
    return np_.divide(x, np_.add(np_.multiply(y, y), 1.0))
  if name == "mask":     # x where cmp(x, y) else 0, by arithmetic
    x, y = args
    m = getattr(np_, params["cmp"])(x, y)
    return np_.multiply(x, np_.astype(m, np_.result_type(x)))
  if name == "lax_binary":
    x, y = args
    op = params["op"]
    if op == "div":
      y = lax_.add(*bk.lax_operands(lax_.mul(y, y), 1.0))
    return getattr(lax_, op)(*bk.lax_operands(x, y))
  if name == "sum":
    return np_.sum(args[0], axis=params["axis"], keepdims=params["keepdims"])
  if name == "max":
    return np_.max(args[0], axis=params["axis"], keepdims=params["keepdims"])
  if name == "transpose":
    return np_.transpose(args[0], params["perm"])
  if name == "reshape":
    return np_.reshape(args[0], params["shape"])
  if name == "lax_broadcast":
    return bk.broadcast(args[0], params["shape"], params["axes"])
  if name == "broadcast_to":
    return np_.broadcast_to(args[0], params["shape"])
  if name == "astype":
    return np_.astype(args[0], params["dtype"])
  raise ValueError(name)


class Const(NamedTuple):
  """A Python scalar operand (weakly typed on both sides)."""
  value: object

  def __repr__(self):
    return repr(self.value)


class Program(NamedTuple):
  in_shapes: tuple
  ops: tuple          # (name, operands (env indices or Consts), params)
  outs: tuple         # env indices of the outputs
  has_f32: bool

  def run(self, bk, *inputs):
    env = list(inputs)
    for name, args, params in self.ops:
      vals = [a.value if isinstance(a, Const) else env[a] for a in args]
      env.append(apply_op(bk, name, params, vals))
    outs = tuple(env[i] for i in self.outs)
    return outs[0] if len(outs) == 1 else outs

  def ours(self, *inputs):
    return self.run(OURS, *inputs)

  def theirs(self, *inputs):
    return self.run(THEIRS, *inputs)

  def __str__(self):
    lines = [f"inputs: {list(self.in_shapes)}"]
    n = len(self.in_shapes)
    for i, (name, args, params) in enumerate(self.ops):
      operands = ", ".join(repr(a) if isinstance(a, Const) else f"v{a}" for a in args)
      lines.append(f"  v{n + i} = {name}({operands}) {params or ''}")
    lines.append(f"  return {', '.join(f'v{i}' for i in self.outs)}")
    return "\n".join(lines)


# --- Generating programs -----------------------------------------------------------------

def _size(shape):
  return int(np.prod(shape, dtype=int))


shapes_st = st.lists(st.integers(1, 3), max_size=2).map(tuple)
const_st = st.sampled_from([-1.5, -0.5, 0.25, 2.0, 3]).map(Const)


def _factorizations(n, max_rank):
  out = [()] if n == 1 else []
  for rank in range(1, max_rank + 1):
    for dims in itertools.product(range(1, n + 1), repeat=rank):
      if _size(dims) == n:
        out.append(dims)
  return out


@st.composite
def programs(draw, n_inputs=(1, 3), n_ops=(1, 6), max_in_size=MAX_SIZE, f32=True):
  nin = draw(st.integers(*n_inputs))
  in_shapes = [draw(shapes_st.filter(lambda s: _size(s) <= max_in_size)) for _ in range(nin)]
  env = [(s, "f64") for s in in_shapes]
  ops, has_f32 = [], False

  def pick(pred=lambda s, d: True):
    cands = [i for i, (s, d) in enumerate(env) if pred(s, d)]
    if not cands:
      return None
    last = [i for i in cands if i >= len(env) - 2]   # favour deep chains
    return draw(st.sampled_from(last)) if last and draw(st.booleans()) else draw(st.sampled_from(cands))

  names = ["sin", "cos", "tanh", "negative", "exp_tanh", "log_sq", "add", "subtract",
           "multiply", "maximum", "div_safe", "mask", "lax_binary", "sum", "max",
           "transpose", "reshape", "lax_broadcast", "broadcast_to"] + (["astype"] if f32 else [])
  for _ in range(draw(st.integers(*n_ops))):
    name = draw(st.sampled_from(names))
    x = pick()
    xs, xd = env[x]
    params, args = {}, [x]
    if name in ("sin", "cos", "tanh", "negative", "exp_tanh", "log_sq"):
      out = (xs, xd)
    elif name in ("add", "subtract", "multiply", "maximum", "div_safe", "mask"):
      def fits(s, d):
        try:
          b = np.broadcast_shapes(xs, s)
        except ValueError:
          return False
        return _size(b) <= MAX_SIZE and len(b) <= MAX_RANK
      y = None if draw(st.integers(0, 4)) == 0 else pick(fits)
      if y is None:
        c = draw(const_st)
        args = [x, c] if draw(st.booleans()) else [c, x]
        out = (xs, xd)
      else:
        args = [x, y] if draw(st.booleans()) else [y, x]
        ys, yd = env[y]
        out = (np.broadcast_shapes(xs, ys), "f64" if "f64" in (xd, yd) else "f32")
      if name == "mask":   # the masked value (first operand) is an array; keeps its dtype
        params = {"cmp": draw(st.sampled_from(["greater", "less", "greater_equal", "less_equal"]))}
        if isinstance(args[0], Const):
          args = args[::-1]
        out = (out[0], env[args[0]][1])
    elif name == "lax_binary":
      params = {"op": draw(st.sampled_from(["add", "sub", "mul", "max", "div"]))}
      y = pick(lambda s, d: d == xd and (s == xs or s == () or xs == ()))
      if y is None or draw(st.integers(0, 5)) == 0:
        y = Const(float(draw(const_st).value))
      args = [x, y] if draw(st.booleans()) else [y, x]
      ys = () if isinstance(y, Const) else env[y][0]
      out = (xs if xs else ys, xd)
    elif name in ("sum", "max"):
      r = len(xs)
      choice = draw(st.integers(0, 2)) if r else 0
      if choice == 0:
        axis = None
      elif choice == 1:
        axis = draw(st.integers(-r, r - 1))
      else:
        axis = tuple(draw(st.permutations(range(r)))[:draw(st.integers(1, r))])
        axis = tuple(a - r if draw(st.booleans()) else a for a in axis)
      keepdims = draw(st.booleans())
      axes = set(range(r)) if axis is None else {a % r for a in np.atleast_1d(axis).tolist()}
      shape = tuple(1 if i in axes else d for i, d in enumerate(xs) if keepdims or i not in axes)
      params, out = {"axis": axis, "keepdims": keepdims}, (shape, xd)
    elif name == "transpose":
      perm = tuple(draw(st.permutations(range(len(xs)))))
      params, out = {"perm": perm}, (tuple(xs[p] for p in perm), xd)
    elif name == "reshape":
      shape = draw(st.sampled_from(_factorizations(_size(xs), MAX_RANK)))
      spelled = shape
      if shape and draw(st.booleans()):
        k = draw(st.integers(0, len(shape) - 1))
        spelled = shape[:k] + (-1,) + shape[k + 1:]
      params, out = {"shape": spelled}, (shape, xd)
    elif name in ("lax_broadcast", "broadcast_to"):
      if len(xs) >= MAX_RANK:
        continue
      d = draw(st.integers(1, 3))
      if _size(xs) * d > MAX_SIZE:
        continue
      if name == "lax_broadcast":
        pos = draw(st.integers(0, len(xs)))
        shape = xs[:pos] + (d,) + xs[pos:]
        params = {"shape": shape, "axes": (pos,)}
      else:   # NumPy-style: a new leading axis, and size-1 axes stretched
        shape = (d,) + tuple(draw(st.integers(1, 3)) if s == 1 and _size(xs) * d * 3 <= MAX_SIZE
                             else s for s in xs)
        params = {"shape": shape}
      out = (shape, xd)
    elif name == "astype":
      dtype = "f32" if xd == "f64" else "f64"
      params, out = {"dtype": np.float32 if dtype == "f32" else np.float64}, (xs, dtype)
      has_f32 = True
    ops.append((name, tuple(args), params))
    env.append(out)
  outs = (len(env) - 1,)
  if draw(st.booleans()) and len(env) > 1:
    outs += (draw(st.integers(0, len(env) - 2)),)
  return Program(tuple(in_shapes), tuple(ops), outs, has_f32)


def inputs_for(program, seed, batch=()):
  """Random inputs; `batch` is a list of (in_axes, size) to insert, inner first."""
  rng = np.random.default_rng(seed)
  out = []
  for i, shape in enumerate(program.in_shapes):
    shape = list(shape)
    for in_axes, size in batch:
      ax = in_axes[i]
      if ax is not None:
        shape.insert(ax % (len(shape) + 1), size)
    out.append(rng.uniform(-2.0, 2.0, shape))
  return out


@st.composite
def in_axes_for(draw, ranks):
  axes = [draw(st.one_of(st.none(), st.integers(-r - 1, r))) for r in ranks]
  if all(a is None for a in axes):
    i = draw(st.integers(0, len(ranks) - 1))
    axes[i] = draw(st.integers(-ranks[i] - 1, ranks[i]))
  return tuple(axes)


def out_ranks(program):
  """The ranks of the program's outputs (from a cheap eager run on zeros)."""
  outs = program.ours(*[np.zeros(s) for s in program.in_shapes])
  outs = outs if isinstance(outs, tuple) else (outs,)
  return [np.ndim(o) for o in outs]


# --- Comparing results ------------------------------------------------------------------------

def assert_trees_close(ours, theirs, tol):
  ol, ot = adx.tree_util.tree_flatten(ours)
  tl, tt = jax.tree_util.tree_flatten(theirs)
  assert len(ol) == len(tl), (ot, tt)
  assert str(ot) == str(tt).removeprefix("PyTreeDef(").removesuffix(")")
  for a, b in zip(ol, tl):
    assert not isinstance(a, adx.core.Tracer), a
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


def tol(program):
  return 2e-4 if program.has_f32 else 1e-9


def tangents_like(xs, seed):
  rng = np.random.default_rng(seed)
  return tuple(rng.uniform(-1.0, 1.0, np.shape(x)) for x in xs)


seeds = st.integers(0, 2**31 - 1)


# --- Programs with control flow ----------------------------------------------
# A program is a block: statements applied in turn to a carried vector x of
# length CF_N, each of which may close over an outer vector w. Statements are
# elementwise ops, and cond, switch, scan, fori_loop (static bounds: a scan),
# while_loop and fori_loop with a traced bound (both a `while`, so forward
# mode only), whose bodies are blocks again: control flow nested in control
# flow, closing over values of the enclosing transformations.

CF_N = 3
CF_OPS = {
    "sin": lambda np_, x, w: np_.sin(x),
    "cos": lambda np_, x, w: np_.cos(x),
    "tanh": lambda np_, x, w: np_.tanh(x),
    "scale": lambda np_, x, w: np_.multiply(x, -1.5),
    "mul_w": lambda np_, x, w: np_.multiply(x, w),
    "add_w": lambda np_, x, w: np_.add(x, np_.multiply(w, 0.5)),
    "div_w": lambda np_, x, w: np_.divide(x, np_.add(np_.multiply(w, w), 1.0)),
    "max_w": lambda np_, x, w: np_.maximum(x, np_.multiply(w, 0.5)),
    "couple": lambda np_, x, w: np_.add(x, np_.multiply(np_.sum(x), 0.25)),
}
FORWARD_ONLY = ("while", "fori_traced")   # a `while`: no reverse mode (nor in
                                          # JAX)


def run_block(bk, block, x, w):
  for stmt in block:
    x = run_stmt(bk, stmt, x, w)
  return x


def run_stmt(bk, stmt, x, w):
  np_, L = bk.np, bk.lax
  kind, args = stmt[0], stmt[1:]
  src = lambda s: x if s == "x" else w
  body = lambda b: lambda v: run_block(bk, b, v, w)
  if kind == "op":
    return CF_OPS[args[0]](np_, x, w)
  if kind == "cond":
    s, thresh, yes, no = args
    return L.cond(np_.sum(src(s)) > thresh, body(yes), body(no), x)
  if kind == "switch":   # an index in -1..3, clamped by switch
    s, branches = args
    i = np_.astype(np_.floor(np_.tanh(np_.sum(src(s))) * 2.0 + 1.0), np_.int32)
    return L.switch(i, [body(b) for b in branches], x)
  if kind == "scan":
    b, coefs, reverse = args
    xs = np_.multiply(np.array(coefs).reshape(-1, 1), w)

    def step(c, xi):
      return body(b)(c * 0.5 + xi * 0.3), np_.sin(c)
    c, ys = L.scan(step, x, xs, reverse=reverse)
    return c + np_.sum(ys, axis=0) * 0.1
  if kind == "fori":
    b, n = args
    return L.fori_loop(0, n, lambda i, c: body(b)(c) * 0.9, x)
  # A trip count of n, or n + 1 where sum(src) > 0: under vmap, each batch
  # element may loop a different number of times.
  b, n, s = args
  k = n + np_.astype(np_.sum(src(s)) > 0.0, np_.int32)
  if kind == "while":
    return L.while_loop(lambda c: c[0] < k, lambda c: (c[0] + 1, body(b)(c[1])),
                        (np.int32(0), x))[1]
  assert kind == "fori_traced", kind
  return L.fori_loop(np.int32(0), k, lambda i, c: body(b)(c) * 0.9, x)


def _pp_block(block, indent):
  pad, lines = " " * indent, []
  for kind, *args in block:
    if kind == "op":
      lines.append(pad + args[0])
      continue
    if kind == "cond":
      s, t, yes, no = args
      head, subs = f"cond sum({s}) > {t}", [("then", yes), ("else", no)]
    elif kind == "switch":
      head, subs = f"switch on sum({args[0]})", [(f"branch {i}", b) for i, b in
                                                 enumerate(args[1])]
    elif kind == "scan":
      head = f"scan xs={list(args[1])} * w reverse={args[2]}"
      subs = [("body", args[0])]
    elif kind == "fori":
      head, subs = f"fori_loop 0..{args[1]}", [("body", args[0])]
    else:
      head = f"{kind} {args[1]} times (+1 if sum({args[2]}) > 0)"
      subs = [("body", args[0])]
    lines.append(pad + head)
    for label, b in subs:
      lines += [f"{pad}  {label}:"] + _pp_block(b, indent + 4)
  return lines


class CFProgram(NamedTuple):
  block: tuple

  def run(self, bk, x, w):
    return run_block(bk, self.block, x, w)

  def ours(self, x, w):
    return self.run(OURS, x, w)

  def theirs(self, x, w):
    return self.run(THEIRS, x, w)

  @property
  def forward_only(self):
    return any(kind in repr(self.block) for kind in FORWARD_ONLY)

  def __str__(self):
    return "\n".join(["program(x, w):"] + _pp_block(self.block, 2))


@st.composite
def cf_blocks(draw, depth, reverse_mode, force_control_flow=False):
  kinds = ["cond", "switch", "scan", "fori"]
  kinds += [] if reverse_mode else list(FORWARD_ONLY)
  stmts = []
  for k in range(draw(st.integers(1, 3))):
    control = depth > 0 and (force_control_flow and k == 0
                             or draw(st.booleans()))
    kind = draw(st.sampled_from(kinds)) if control else "op"
    sub = lambda: draw(cf_blocks(depth - 1, reverse_mode))
    src = draw(st.sampled_from(["x", "w"]))
    if kind == "op":
      stmts.append(("op", draw(st.sampled_from(sorted(CF_OPS)))))
    elif kind == "cond":
      thresh = draw(st.sampled_from([-0.5, 0.0, 0.7]))
      stmts.append(("cond", src, thresh, sub(), sub()))
    elif kind == "switch":
      n = draw(st.integers(1, 3))
      stmts.append(("switch", src, tuple(sub() for _ in range(n))))
    elif kind == "scan":
      coefs = tuple(draw(st.lists(st.sampled_from([-1.0, 0.5, 1.0, 2.0]),
                                  min_size=0, max_size=3)))
      stmts.append(("scan", sub(), coefs, draw(st.booleans())))
    elif kind == "fori":
      stmts.append(("fori", sub(), draw(st.integers(0, 3))))
    else:
      stmts.append((kind, sub(), draw(st.integers(0, 2)), src))
  return tuple(stmts)


def cf_programs(depth=2, reverse_mode=False):
  """Programs with (nested) control flow; `reverse_mode`: none with a while."""
  return cf_blocks(depth, reverse_mode, force_control_flow=True).map(CFProgram)


def cf_inputs(seed, batch=(None, None)):
  """x and w, each with a leading batch axis of size B where `batch` says 0."""
  rng = np.random.default_rng(seed)
  return [rng.uniform(-1.0, 1.0, (CF_N,) if ax is None else (B, CF_N))
          for ax in batch]


# --- The tests (JAX's side is jitted: much faster than op by op) -----------------------------------------------------------------------------------

@given(programs(), seeds)
def test_eval_and_jvp_match_jax(program, seed):
  note(str(program))
  xs = inputs_for(program, seed)
  ts = tangents_like(xs, seed + 1)
  assert_trees_close(program.ours(*xs), jax.jit(program.theirs)(*xs), tol(program))
  ours = adx.jvp(program.ours, tuple(xs), ts)
  theirs = jax.jit(lambda xs, ts: jax.jvp(program.theirs, xs, ts))(tuple(xs), ts)
  assert_trees_close(ours, theirs, tol(program))


@given(programs(f32=False), seeds)
def test_jvp_matches_finite_differences(program, seed):
  note(str(program))
  xs = inputs_for(program, seed)
  ts = tangents_like(xs, seed + 1)
  _, tan = adx.jvp(program.ours, tuple(xs), ts)
  eps = 1e-6
  plus = program.ours(*[x + eps * t for x, t in zip(xs, ts)])
  minus = program.ours(*[x - eps * t for x, t in zip(xs, ts)])
  fd = jax.tree_util.tree_map(lambda p, m: (np.asarray(p) - np.asarray(m)) / (2 * eps), plus, minus)
  for a, b in zip(adx.tree_util.tree_leaves(tan), adx.tree_util.tree_leaves(fd)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@given(programs(), seeds, st.data())
def test_vmap_matches_jax(program, seed, data):
  note(str(program))
  in_axes = data.draw(in_axes_for([len(s) for s in program.in_shapes]), "in_axes")
  out_axes = tuple(data.draw(st.integers(-r - 1, r)) for r in out_ranks(program))
  out_axes = out_axes[0] if len(out_axes) == 1 else out_axes
  note(f"out_axes={out_axes}")
  xs = inputs_for(program, seed, [(in_axes, B)])
  ours = adx.vmap(program.ours, in_axes, out_axes)(*xs)
  theirs = jax.jit(jax.vmap(program.theirs, in_axes, out_axes))(*xs)
  assert_trees_close(ours, theirs, tol(program))


@given(programs(), seeds, st.data())
def test_vmap_of_vmap_matches_jax(program, seed, data):
  note(str(program))
  ranks = [len(s) for s in program.in_shapes]
  inner = data.draw(in_axes_for(ranks), "inner in_axes")
  outer = data.draw(in_axes_for([r + (a is not None) for r, a in zip(ranks, inner)]), "outer")
  xs = inputs_for(program, seed, [(inner, B), (outer, 3)])
  ours = adx.vmap(adx.vmap(program.ours, inner), outer, out_axes=-1)(*xs)
  theirs = jax.jit(jax.vmap(jax.vmap(program.theirs, inner), outer, out_axes=-1))(*xs)
  assert_trees_close(ours, theirs, tol(program))


@given(programs(), seeds, st.data())
def test_jvp_of_vmap_matches_jax(program, seed, data):
  note(str(program))
  in_axes = data.draw(in_axes_for([len(s) for s in program.in_shapes]), "in_axes")
  xs = inputs_for(program, seed, [(in_axes, B)])
  ts = tangents_like(xs, seed + 1)
  ours = adx.jvp(adx.vmap(program.ours, in_axes), tuple(xs), ts)
  theirs = jax.jit(lambda xs, ts: jax.jvp(jax.vmap(program.theirs, in_axes), xs, ts))(
      tuple(xs), ts)
  assert_trees_close(ours, theirs, tol(program))


@given(programs(), seeds, st.data())
def test_vmap_of_jvp_matches_jax(program, seed, data):
  note(str(program))
  n = len(program.in_shapes)
  in_axes = data.draw(in_axes_for([len(s) for s in program.in_shapes]), "in_axes")
  xs = inputs_for(program, seed, [(in_axes, B)])
  ts = tangents_like(xs, seed + 1)    # batched like their primals
  ours = adx.vmap(lambda *a: adx.jvp(program.ours, a[:n], a[n:]), in_axes * 2)(*xs, *ts)
  theirs = jax.jit(jax.vmap(lambda *a: jax.jvp(program.theirs, a[:n], a[n:]), in_axes * 2))(
      *xs, *ts)
  assert_trees_close(ours, theirs, tol(program))


@given(programs(n_ops=(1, 4)), seeds)
def test_jvp_of_jvp_matches_jax(program, seed):
  note(str(program))
  xs = tuple(inputs_for(program, seed))
  t1, t2 = tangents_like(xs, seed + 1), tangents_like(xs, seed + 2)
  ours = adx.jvp(lambda *x: adx.jvp(program.ours, x, t1)[1], xs, t2)
  theirs = jax.jit(lambda xs: jax.jvp(lambda *x: jax.jvp(program.theirs, x, t1)[1], xs, t2))(xs)
  assert_trees_close(ours, theirs, tol(program))


@given(programs(), seeds, st.data())
def test_jacfwd_matches_jax(program, seed, data):
  note(str(program))
  n = len(program.in_shapes)
  argnums = data.draw(st.one_of(st.integers(0, n - 1),
                                st.lists(st.integers(0, n - 1), min_size=1, max_size=n,
                                         unique=True).map(tuple)), "argnums")
  xs = inputs_for(program, seed)
  ours = adx.jacfwd(program.ours, argnums)(*xs)
  theirs = jax.jit(jax.jacfwd(program.theirs, argnums))(*xs)
  assert_trees_close(ours, theirs, tol(program))


@given(programs(n_inputs=(1, 1), n_ops=(1, 4), max_in_size=6), seeds)
def test_jacfwd_of_jacfwd_matches_jax(program, seed):
  note(str(program))
  xs = inputs_for(program, seed)
  ours = adx.jacfwd(adx.jacfwd(program.ours))(*xs)
  theirs = jax.jit(jax.jacfwd(jax.jacfwd(program.theirs)))(*xs)
  assert_trees_close(ours, theirs, tol(program))


def test_enough_examples():
  """The programs above run at least 200 examples per test session."""
  from hypothesis import settings as s
  n_tests = sum(1 for name in globals() if name.startswith("test_") and name != "test_enough_examples")
  assert s.default.max_examples * n_tests >= 200


# --- Programs that once failed, kept as fixed regression tests ------------------------------------

REGRESSIONS = [
    # Python scalars combined by autodidax.numpy stayed strongly typed float64
    # (np.float64), so dividing a float32 by them gave float64, not float32.
    Program(in_shapes=((), ()), ops=(("astype", (0,), {"dtype": np.float32}),
                                     ("div_safe", (2, Const(-1.5)), {})),
            outs=(3,), has_f32=True),
    Program(in_shapes=((2,),), ops=(("astype", (0,), {"dtype": np.float32}),
                                    ("lax_binary", (Const(3.0), 1), {"op": "div"}),
                                    ("multiply", (Const(2), 2), {}),
                                    ("log_sq", (3,), {})),
            outs=(4, 1), has_f32=True),
]


@pytest.mark.parametrize("program", REGRESSIONS, ids=str)
def test_regressions(program):
  xs = inputs_for(program, 0)
  ts = tangents_like(xs, 1)
  assert_trees_close(program.ours(*xs), program.theirs(*xs), tol(program))
  assert_trees_close(adx.jvp(program.ours, tuple(xs), ts),
                     jax.jvp(program.theirs, tuple(xs), ts), tol(program))
  assert_trees_close(adx.jacfwd(program.ours)(*xs), jax.jacfwd(program.theirs)(*xs), tol(program))
  in_axes = (0,) * len(xs)
  xb = inputs_for(program, 2, [(in_axes, B)])
  assert_trees_close(adx.vmap(program.ours, in_axes)(*xb),
                     jax.vmap(program.theirs, in_axes)(*xb), tol(program))
