"""Control-flow primitives (cond, while, scan) against real JAX.

The seed examples of the jaxpr-language chapter (one_of_three, func7, func8,
func10, func11, func12): values, and the structure of the printed jaxpr
(primitive names and the parameters both share); random programs with control
flow under jvp, vmap, grad and jit (float64, as conftest sets); lowering
(verified StableHLO), the FLOPS interpreter, the nested jaxpr graph, and the
errors a learner can cause.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import autodidax as adx
import autodidax.numpy as anp
from autodidax import control_flow as cf
from autodidax import core, lax, runtime

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:jax.*")


def assert_close(ours, theirs, atol=1e-8):
  lo, lt = jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(theirs)
  assert len(lo) == len(lt)
  for a, b in zip(lo, lt):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=atol, rtol=1e-7)


# --- The seed examples, written twice: with autodidax and with JAX -------------------------

def one_of_three(L):
  def f(index, arg):
    return L.switch(index, [lambda x: x + 1., lambda x: x - 2., lambda x: x + 3.], arg)
  return f


def func7(L):
  def f(arg):
    return L.cond(arg >= 0., lambda xtrue: xtrue + 3., lambda xfalse: xfalse - 3., arg)
  return f


def func8(L, np_):
  def f(arg1, arg2):
    return L.cond(arg1 >= 0., lambda xtrue: xtrue[0],
                  lambda xfalse: np_.array([1]) + xfalse[1], arg2)
  return f


def func10(L, np_):
  def f(arg, n):
    ones = np_.ones(arg.shape)
    return L.fori_loop(0, n, lambda i, carry: carry + ones * 3. + arg, arg + ones)
  return f


def func11(L, np_):
  def f(arr, extra):
    ones = np_.ones(arr.shape)

    def body(carry, aelems):
      ae1, ae2 = aelems
      return (carry + ae1 * ae2 + extra, carry)
    return L.scan(body, 0., (arr, ones))
  return f


def func12(jit, np_):
  def f(arg):
    @jit
    def inner(x):
      return x + arg * np_.ones(1)
    return arg + inner(arg - 2.)
  return f


class _NP:   # numpy for the autodidax side: ones() is a NumPy constant
  array = staticmethod(np.array)
  ones = staticmethod(np.ones)


SEEDS = {
    "one_of_three": (one_of_three(lax), one_of_three(jax.lax), [(1, 5.), (0, 5.), (7, 5.), (-2, 5.)]),
    "func7": (func7(lax), func7(jax.lax), [(5.,), (-5.,)]),
    "func8": (func8(lax, _NP), func8(jax.lax, jnp),
              [(5., (np.zeros(1), 2.)), (-5., (np.zeros(1), 2.))]),
    "func10": (func10(lax, _NP), func10(jax.lax, jnp), [(np.ones(16), 5), (np.arange(4.), 0)]),
    "func11": (func11(lax, _NP), func11(jax.lax, jnp), [(np.ones(16), 5.), (np.arange(5.), -1.)]),
    "func12": (func12(adx.jit, _NP), func12(jax.jit, jnp), [(1.,), (-3.,)]),
}


@pytest.mark.parametrize("name", list(SEEDS))
def test_seed_values(name):
  ours, theirs, argsets = SEEDS[name]
  for args in argsets:
    assert_close(ours(*args), theirs(*args))
    assert_close(adx.jit(ours)(*args), theirs(*args))


def _hop(closed, names):
  """The first equation of a control-flow primitive (searching nested jaxprs)."""
  for eqn in closed.eqns:
    if eqn.primitive.name in names:
      return eqn
  raise AssertionError(f"no {names} equation in\n{closed}")


def _sub_jaxprs(eqn, key):
  v = eqn.params[key]
  items = v if isinstance(v, tuple) else (v,)
  return [getattr(j, "jaxpr", j) for j in items]


# Our names for JAX's primitives, where they differ; equations JAX adds for
# weak types (convert_element_type) are left out of the comparison.
_RENAME = {"ge": "greater_equal", "lt": "less", "broadcast_in_dim": "broadcast",
           "pjit": "xla_call", "jit": "xla_call"}


def _prims(jaxpr):
  return sorted(_RENAME.get(e.primitive.name, e.primitive.name) for e in jaxpr.eqns
                if e.primitive.name not in ("convert_element_type",))


@pytest.mark.parametrize("name,args,prim,shared", [
    ("one_of_three", (1, 5.), "cond", ()),
    ("func7", (5.,), "cond", ()),
    ("func8", (5., (np.zeros(1), 2.)), "cond", ()),
    ("func10", (np.ones(16), 5), "while", ("cond_nconsts", "body_nconsts")),
    ("func11", (np.ones(16), 5.), "scan", ("num_consts", "num_carry", "length", "reverse")),
])
def test_seed_structure(name, args, prim, shared):
  ours, theirs, _ = SEEDS[name]
  mine = _hop(adx.make_jaxpr(ours)(*args), {prim})
  ref = _hop(jax.make_jaxpr(theirs)(*args), {prim})
  for k in shared:
    assert mine.params[k] == ref.params[k], k
  assert len(mine.inputs) == len(ref.invars)          # JAX: eqn.invars, eqn.outvars
  assert len(mine.out_binders) == len(ref.outvars)
  for key in {"cond": ["branches"], "while": ["cond_jaxpr", "body_jaxpr"],
              "scan": ["jaxpr"]}[prim]:
    for a, b in zip(_sub_jaxprs(mine, key), _sub_jaxprs(ref, key)):
      assert len(a.invars) == len(b.invars)
      assert len(a.outvars) == len(b.outvars)
      # func8, func10: our np.ones/np.array are NumPy constants, folded before
      # tracing (JAX stages jnp.ones as broadcast_in_dim and keeps `ones * 3.`).
      if name not in ("func8", "func10"):
        assert _prims(a) == _prims(b), (a, b)
  assert str(adx.make_jaxpr(ours)(*args)).count(f"{prim}[") == 1


def test_seed_static_fori_is_a_scan_as_in_jax():
  ours, theirs, _ = SEEDS["func10"]
  mine = adx.make_jaxpr(lambda a: ours(a, 5))(np.ones(16))
  ref = jax.make_jaxpr(lambda a: theirs(a, 5))(np.ones(16))
  m, r = _hop(mine, {"scan"}), _hop(ref, {"scan"})
  for k in ("num_consts", "num_carry", "length", "reverse"):
    assert m.params[k] == r.params[k]


def test_seed_func12_call_primitive():
  ours, theirs, _ = SEEDS["func12"]
  mine = adx.make_jaxpr(ours)(1.)
  ref = jax.make_jaxpr(theirs)(1.)
  assert "xla_call" in _prims(mine.jaxpr) and "xla_call" in _prims(ref.jaxpr)
  inner = _hop(mine, {"xla_call"}).params["jaxpr"]
  assert [e.primitive.name for e in inner.eqns] == ["mul", "add"]


def test_printing_layout():
  text = str(adx.make_jaxpr(SEEDS["func7"][0])(5.))
  assert "cond[\n      branches=(\n        { lambda ; " in text
  assert "\n      )\n    ] c a" in text
  text = str(adx.make_jaxpr(SEEDS["func10"][0])(np.ones(16), 5))
  for line in ("body_jaxpr={ lambda ;", "body_nconsts=2", "cond_jaxpr={ lambda ;", "cond_nconsts=0"):
    assert line in text
  # One naming context: inner binders continue the outer names.
  assert "h:f64[16] i:f64[16] j:i32[] k:i32[] l:f64[16]" in text   # `_` binders take no letter
  assert "] b c 0:i32[] f e" in text   # 2 body consts, then the carry (i, upper, x)


# --- Random programs with control flow, against JAX ------------------------------------------

UNARY = {"sin": (anp.sin, jnp.sin), "tanh": (anp.tanh, jnp.tanh), "cos": (anp.cos, jnp.cos),
         "sq": (lambda x: x * x * 0.5, lambda x: x * x * 0.5)}
BINARY = {"mul": (lambda x, w: x * w, lambda x, w: x * w),
          "add": (lambda x, w: x + w, lambda x, w: x + w),
          "sub": (lambda x, w: x - w * 0.5, lambda x, w: x - w * 0.5)}


@st.composite
def bodies(draw):
  ops = draw(st.lists(st.one_of(st.sampled_from(sorted(UNARY)), st.sampled_from(sorted(BINARY))),
                      min_size=1, max_size=3))

  def make(side):
    def body(x, w):
      for op in ops:
        x = UNARY[op][side](x) if op in UNARY else BINARY[op][side](x, w)
      return x
    return body
  return ops, make


@st.composite
def programs(draw, kinds=("cond", "switch", "scan", "scan_rev", "fori", "nested")):
  kind = draw(st.sampled_from(kinds))
  (_, b1), (_, b2) = draw(bodies()), draw(bodies())
  thresh = draw(st.sampled_from([-0.5, 0.0, 0.7]))
  n = draw(st.integers(0, 3))

  def make(side):
    L, np_ = (lax, anp) if side == 0 else (jax.lax, jnp)
    f1, f2 = b1(side), b2(side)
    if kind == "cond":
      return lambda x, w: L.cond(np_.sum(x) > thresh, lambda a: f1(a, w), lambda a: f2(a, w), x)
    if kind == "switch":
      return lambda x, w: L.switch(n, [lambda a: f1(a, w), lambda a: f2(a, w), lambda a: a * w], x)
    if kind in ("scan", "scan_rev"):
      def f(x, w):
        def body(c, xi):
          c2 = f1(c * 0.5 + xi, w)
          return c2, f2(c, xi)
        xs = np.array([[1.], [0.5], [-1.]]) * w + np.array([[0.], [0.2], [0.3]])
        c, ys = L.scan(body, x, xs, reverse=kind == "scan_rev")
        return c + np_.sum(ys, 0)
      return f
    if kind == "fori":
      return lambda x, w: L.fori_loop(0, n, lambda i, c: f1(c, w) * 0.9, x)
    if kind == "nested":
      def f(x, w):
        def body(c, xi):
          c = L.cond(np_.sum(c) > thresh, lambda a: f1(a, xi), lambda a: f2(a, w), c)
          return c, c
        c, ys = L.scan(body, x, np.array([[1.], [-1.]]) * w)
        return c + np_.sum(ys, 0)
      return f
    if kind == "while":
      return lambda x, w: L.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, f1(c[1], w)),
                                       (0, x))[1]
    raise AssertionError(kind)
  return kind, make(0), make(1)


def _inputs(seed, shape=(3,)):
  r = np.random.RandomState(seed)
  return r.uniform(-1, 1, shape), r.uniform(-1, 1, shape)


_few = settings(max_examples=8)


@_few
@given(programs(), st.integers(0, 1000))
def test_programs_value_and_jit(prog, seed):
  _, ours, theirs = prog
  x, w = _inputs(seed)
  assert_close(ours(x, w), theirs(x, w))
  assert_close(adx.jit(ours)(x, w), theirs(x, w))


@_few
@given(programs(kinds=("cond", "switch", "scan", "scan_rev", "fori", "nested", "while")),
       st.integers(0, 1000))
def test_programs_jvp(prog, seed):
  _, ours, theirs = prog
  x, w = _inputs(seed)
  tx, tw = _inputs(seed + 1)
  assert_close(adx.jvp(ours, (x, w), (tx, tw)), jax.jvp(theirs, (x, w), (tx, tw)))


@_few
@given(programs(kinds=("cond", "switch", "scan", "fori", "nested", "while")), st.integers(0, 1000),
       st.sampled_from([(0, 0), (0, None), (None, 0)]))
def test_programs_vmap(prog, seed, in_axes):
  _, ours, theirs = prog
  x, w = _inputs(seed, (4, 3))
  if in_axes[0] is None:
    x = x[0]
  if in_axes[1] is None:
    w = w[0]
  assert_close(adx.vmap(ours, in_axes)(x, w), jax.vmap(theirs, in_axes)(x, w))


@_few
@given(programs(), st.integers(0, 1000))
def test_programs_grad(prog, seed):
  _, ours, theirs = prog
  x, w = _inputs(seed)
  g_ours = adx.grad(lambda a, b: anp.sum(ours(a, b)), argnums=(0, 1))(x, w)
  g_theirs = jax.grad(lambda a, b: jnp.sum(theirs(a, b)), argnums=(0, 1))(x, w)
  assert_close(g_ours, g_theirs)


@settings(max_examples=6)
@given(programs(kinds=("cond", "scan", "nested")), st.integers(0, 1000))
def test_programs_grad_of_jit_and_vmap_of_grad(prog, seed):
  _, ours, theirs = prog
  x, w = _inputs(seed, (2, 3))
  lo = lambda a, b: anp.sum(ours(a, b))
  lt = lambda a, b: jnp.sum(theirs(a, b))
  assert_close(adx.grad(adx.jit(lo))(x[0], w[0]), jax.grad(lt)(x[0], w[0]))
  assert_close(adx.vmap(adx.grad(lo))(x, w), jax.vmap(jax.grad(lt))(x, w))


# --- Specific transformations -------------------------------------------------------------------

def test_vmap_cond_batched_predicate_selects():
  f = lambda x: lax.cond(x > 0., anp.sin, lambda z: z * 2., x)
  xs = np.array([-1., 0.5, 2., -3.])
  jaxpr = adx.make_jaxpr(adx.vmap(f))(xs)
  names = [e.primitive.name for e in jaxpr.eqns]
  assert "select_n" in names and "cond" not in names
  assert_close(adx.vmap(f)(xs), jax.vmap(lambda x: jax.lax.cond(x > 0., jnp.sin,
                                                                lambda z: z * 2., x))(xs))


def test_vmap_while_batched_predicate():
  f = lambda x: lax.while_loop(lambda c: c < 10., lambda c: c * 2., x)
  xs = np.array([0.5, 3., 11., 1.])
  assert_close(adx.vmap(f)(xs), jax.vmap(lambda x: jax.lax.while_loop(
      lambda c: c < 10., lambda c: c * 2., x))(xs))


def test_fori_with_traced_bounds_is_a_while_and_jvps():
  f = lambda x, n: lax.fori_loop(0, n, lambda i, c: anp.sin(c) + i, x)
  jaxpr = adx.make_jaxpr(f)(1., 3)
  assert "while[" in str(jaxpr)
  g = lambda x, n: jax.lax.fori_loop(0, n, lambda i, c: jnp.sin(c) + i, x)
  assert_close(adx.jvp(lambda x: f(x, 3), (0.3,), (1.,)), jax.jvp(lambda x: g(x, 3), (0.3,), (1.,)))


def test_scan_closure_conversion_hoists_outer_tracer():
  def f(w):
    return lax.scan(lambda c, x: (c * w + x, c), 1., np.arange(3.))[0]
  jaxpr = adx.make_jaxpr(f)(2.)
  eqn = _hop(jaxpr, {"scan"})
  assert eqn.params["num_consts"] == 1
  assert_close(adx.grad(f)(2.), jax.grad(
      lambda w: jax.lax.scan(lambda c, x: (c * w + x, c), 1., jnp.arange(3.))[0])(2.))


def test_linearize_of_while_keeps_primal_known():
  f = lambda x: lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, anp.sin(c[1])), (0, x))[1]
  y, f_lin = adx.linearize(f, 0.7)
  assert_close(y, np.sin(np.sin(np.sin(0.7))))
  assert_close(f_lin(1.), jax.jvp(lambda x: jax.lax.while_loop(
      lambda c: c[0] < 3, lambda c: (c[0] + 1, jnp.sin(c[1])), (0, x))[1], (0.7,), (1.,))[1])


# --- Lowering -------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["cond", "switch_vmap", "while", "while_vmap", "scan", "scan_grad"])
def test_lowering_verifies(name):
  x = np.array([0.5, -1., 2.])
  fs = {
      "cond": (lambda x: lax.cond(anp.sum(x) > 0., anp.sin, anp.cos, x), (x,)),
      "switch_vmap": (adx.vmap(lambda i, x: lax.switch(i, [anp.sin, anp.cos, anp.tanh], x)),
                      (np.array([0, 2, 1], np.int32), x)),
      "while": (lambda x: lax.while_loop(lambda c: anp.sum(c) < 10., lambda c: c * 2., x), (x * x + 1.,)),
      "while_vmap": (adx.vmap(lambda x: lax.while_loop(lambda c: c < 10., lambda c: c * 2., x)), (x * x + 1.,)),
      "scan": (lambda x: lax.scan(lambda c, xi: (c + xi, c * xi), 0., x, reverse=True), (x,)),
      "scan_grad": (adx.grad(lambda x: lax.scan(lambda c, xi: (anp.sin(c) * xi, c), 1., x)[0]), (x,)),
  }
  f, args = fs[name]
  runtime.verify(adx.jit(f).lower(*args).as_text())
  assert_close(adx.jit(f)(*args), f(*args))


def test_carry_fixpoint_spreads_along_the_carry():
  from autodidax.control_flow.loops import carry_fixpoint
  shift = lambda c: [False] + c[:-1]   # carry k takes carry k-1's value
  assert carry_fixpoint([False, True, False, False], shift) == [False, True, True, True]
  assert carry_fixpoint([False, False], shift) == [False, False]
  # a rotating carry (x, y) -> (y, x): one nonzero tangent makes both nonzero
  f = lambda x, y: lax.fori_loop(0, 3, lambda i, c: (c[1] * 2., c[0]), (x, y))
  assert jax.jvp(lambda x: jax.lax.fori_loop(0, 3, lambda i, c: (c[1] * 2., c[0]), (x, 1.)),
                 (1.,), (1.,))[1] == (0., 2.)
  assert adx.jvp(lambda x: f(x, 1.), (1.,), (1.,))[1] == (0., 2.)


# --- FLOPS ----------------------------------------------------------------------------------------

def test_flops_counts_per_primitive_and_trip_counts():
  def f(x):
    y = anp.sin(x) * 2.                               # 3 + 3
    y = lax.cond(anp.sum(y) > 100., anp.cos, lambda z: z + 1., y)   # sum 2, greater 1, add 3
    c, _ = lax.scan(lambda c, xi: (c * xi, c), 1., y)   # 3 muls
    n = lax.while_loop(lambda c: c < 5., lambda c: c + 1., 0.)      # 5 adds, 6 compares
    return c + n
  counts = adx.flops(f)(np.ones(3))
  assert counts.by_primitive == {"sin": 3, "mul": 6, "reduce_sum": 2, "greater": 1,
                                 "add": 9, "less": 6}
  assert counts.total == 27


def test_flops_dot_general():
  a, b = np.ones((4, 5)), np.ones((5, 6))
  assert adx.flops(lambda a, b: a @ b)(a, b).total == 2 * 4 * 5 * 6


def test_flops_rules_live_in_tables_keyed_by_primitive():
  from autodidax.control_flow import clamp_p, cond_p, scan_p, select_n_p, while_p
  from autodidax.flop_count import flops_call_rules, flops_rules
  assert {cond_p, while_p, scan_p} <= set(flops_call_rules)   # they run sub-jaxprs
  assert {select_n_p, clamp_p, adx.lax.dot_general_p} <= set(flops_rules)
  # a primitive without a FLOPS rule: the error names the rule and the primitive
  twice_p = adx.Primitive("twice")
  with core.impl_rules.override(twice_p, lambda x: 2 * x), \
       core.abstract_eval_rules.override(twice_p, lambda x: x):
    f = lambda x: twice_p.bind(x) + 1.
    assert_close(f(np.ones(2)), 3 * np.ones(2))
    with pytest.raises(adx.MissingRuleError, match="FLOPS rule for 'twice'.*flops_rules"):
      adx.flops(f)(np.ones(2))
    with flops_rules.override(twice_p, lambda avals_in, avals_out: 7):
      assert adx.flops(f)(np.ones(2)).by_primitive == {"twice": 7, "add": 2}


# --- Pictures --------------------------------------------------------------------------------------

def test_nested_graph_has_clusters():
  pytest.importorskip("graphviz")
  from autodidax import viz
  g = viz.jaxpr_graph_nested(adx.make_jaxpr(SEEDS["func11"][0])(np.ones(4), 5.))
  src = g.source
  assert "cluster_" in src and "scan" in src


# --- Errors -------------------------------------------------------------------------------------------

def test_error_branch_type_mismatch():
  with pytest.raises(TypeError, match="same types"):
    lax.cond(True, lambda x: x, lambda x: anp.sum(x), np.ones(3))
  with pytest.raises(TypeError, match="same structure"):
    lax.cond(True, lambda x: (x, x), lambda x: x, 1.)


def test_error_non_scalar_predicate():
  with pytest.raises(TypeError, match="scalar"):
    lax.cond(np.array([True, False]), lambda x: x, lambda x: x, 1.)
  with pytest.raises(TypeError, match="integer"):
    lax.switch(1.5, [lambda x: x], 1.)


def test_error_reverse_mode_of_while():
  f = lambda x: lax.while_loop(lambda c: c < 10., lambda c: c * 2., x)
  with pytest.raises(cf.WhileLoopReverseModeError, match="scan"):
    adx.grad(f)(1.)
  with pytest.raises(cf.WhileLoopReverseModeError):
    adx.grad(adx.jit(f))(1.)
  with pytest.raises(cf.WhileLoopReverseModeError):
    adx.grad(adx.jit(lambda x, n: lax.fori_loop(0, n, lambda i, c: c * 2., x)))(1., 3)
  assert_close(adx.jacfwd(f)(1.), 16.)   # forward mode works


def test_error_carry_type_changes():
  with pytest.raises(TypeError, match="carry"):
    lax.scan(lambda c, x: (c + x, c), 0., np.ones((3, 2)))
  with pytest.raises(TypeError, match="carry"):
    lax.while_loop(lambda c: anp.sum(c) < 3., lambda c: anp.sum(c), np.ones(2))
  with pytest.raises(TypeError, match="boolean scalar"):
    lax.while_loop(lambda c: c, lambda c: c * 2., 1.)
