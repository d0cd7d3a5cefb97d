"""autodidax.stackless (the chapter "JAX today"): the context-based design must
give the same results as the level-based one of Parts 1-4 and as JAX, on random
programs (straight-line, and with nested control flow) under every
transformation stack; stage the same jaxprs; keep nested derivatives apart by
their trace tags; and name only JAX pieces that the installed jax has."""
import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

import autodidax as adx
import autodidax.numpy as anp
from autodidax import ad, core, lax, stackless as sl, viz
from autodidax.control_flow import WhileLoopReverseModeError
from autodidax.jaxpr import Var
from test_autodiff import ad_programs, pack, scalar_fun, weights_for
from test_programs import (OURS, THEIRS, assert_trees_close, cf_inputs,
                           cf_programs, in_axes_for, inputs_for, programs,
                           seeds, tangents_like, tol)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:jax.*")

# Few examples each (the file takes about a minute and a half); JAX's side is
# jitted, much faster than op by op. test_programs & co. cover the old design.
few = settings(max_examples=8)
fewer = settings(max_examples=4)   # reverse mode, or compiled by both jits


@pytest.fixture(autouse=True)
def context_is_reset():
  yield
  assert sl.current_trace() is sl.eval_trace
  assert core.hooks.design is core.levels


def three_ways(ours_old, ours_new, theirs, program):
  """Both designs give the same (up to rounding) and agree with JAX; `theirs`
  is a function of no arguments, run jitted."""
  theirs = jax.jit(theirs)()
  assert_trees_close(ours_new, theirs, tol(program))
  assert_trees_close(ours_old, theirs, tol(program))


# --- Forward mode and batching --------------------------------------------------------------

@few
@given(programs(), seeds, st.data())
def test_jvp_and_vmap(program, seed, data):
  note(str(program))
  xs = tuple(inputs_for(program, seed))
  ts = tangents_like(xs, seed + 1)
  three_ways(adx.jvp(program.ours, xs, ts), sl.jvp(program.ours, xs, ts),
             lambda: jax.jvp(program.theirs, xs, ts), program)
  in_axes = data.draw(in_axes_for([len(s) for s in program.in_shapes]), "in_axes")
  xb = inputs_for(program, seed, [(in_axes, 2)])
  three_ways(adx.vmap(program.ours, in_axes)(*xb), sl.vmap(program.ours, in_axes)(*xb),
             lambda: jax.vmap(program.theirs, in_axes)(*xb), program)


@few
@given(programs(n_ops=(1, 4)), seeds, st.data())
def test_nested_forward(program, seed, data):
  note(str(program))
  n = len(program.in_shapes)
  in_axes = data.draw(in_axes_for([len(s) for s in program.in_shapes]), "in_axes")
  xs = tuple(inputs_for(program, seed, [(in_axes, 2)]))
  ts = tangents_like(xs, seed + 1)
  def jvp_of_vmap(T, run):
    return T.jvp(T.vmap(run, in_axes), xs, ts)

  def vmap_of_jvp(T, run):
    return T.vmap(lambda *a: T.jvp(run, a[:n], a[n:]), in_axes * 2)(*xs, *ts)

  for both in (jvp_of_vmap, vmap_of_jvp):
    three_ways(both(adx, program.ours), both(sl, program.ours),
               lambda: both(jax, program.theirs), program)
  x1 = tuple(inputs_for(program, seed))
  t1, t2 = tangents_like(x1, seed + 2), tangents_like(x1, seed + 3)
  jj = lambda T, f: T.jvp(lambda *x: T.jvp(f, x, t1)[1], x1, t2)   # jvp of jvp
  three_ways(jj(adx, program.ours), jj(sl, program.ours), lambda: jj(jax, program.theirs),
             program)


# --- Reverse mode --------------------------------------------------------------------------------

@fewer
@given(ad_programs(n_ops=(1, 4)), seeds, st.data())
def test_grad_and_its_compositions(program, seed, data):
  note(str(program))
  xs = inputs_for(program, seed)
  w = weights_for(program, seed + 1)
  f, f_j = scalar_fun(program, OURS, w), scalar_fun(program, THEIRS, w)
  three_ways(adx.grad(f)(pack(xs)), sl.grad(f)(pack(xs)), lambda: jax.grad(f_j)(pack(xs)),
             program)
  ts = pack(tangents_like(xs, seed + 2))   # forward over reverse
  three_ways(adx.jvp(adx.grad(f), (pack(xs),), (ts,)), sl.jvp(sl.grad(f), (pack(xs),), (ts,)),
             lambda: jax.jvp(jax.grad(f_j), (pack(xs),), (ts,)), program)
  in_axes = data.draw(in_axes_for([len(s) for s in program.in_shapes]), "in_axes")
  xb = inputs_for(program, seed, [(in_axes, 2)])

  def vmap_of_grad(T, g):   # per-example gradients
    return T.vmap(lambda *a: T.grad(g)(pack(a)), in_axes)(*xb)

  def grad_of_vmap(T, g):
    total = lambda *a: T.vmap(lambda *b: g(pack(b)), in_axes)(*a).sum()
    return T.grad(lambda a: total(*a))(tuple(xb))

  for both in (vmap_of_grad, grad_of_vmap):
    three_ways(both(adx, f), both(sl, f), lambda: both(jax, f_j), program)


@fewer
@given(ad_programs(n_inputs=(1, 1), n_ops=(1, 3), max_in_size=6, contractions=False), seeds)
def test_grad_of_grad_and_reverse_over_forward(program, seed):
  note(str(program))
  x = inputs_for(program, seed)[0]
  w = weights_for(program, seed + 1)
  f, f_j = scalar_fun(program, OURS, w), scalar_fun(program, THEIRS, w)
  v = tangents_like([x], seed + 2)[0]
  hvp = lambda T, g: T.grad(lambda y: T.jvp(lambda z: g({"w": z}), (y,), (v,))[1])(x)
  three_ways(hvp(adx, f), hvp(sl, f), lambda: hvp(jax, f_j), program)
  gg = lambda T, g: T.grad(lambda y: anp.sum(T.grad(lambda z: g({"w": z}))(y) * v)
                           if T is not jax else jnp.sum(T.grad(lambda z: g({"w": z}))(y) * v))(x)
  three_ways(gg(adx, f), gg(sl, f), lambda: gg(jax, f_j), program)


@fewer
@given(ad_programs(n_ops=(1, 5)), seeds)
def test_linearize_stages_only_tangent_work(program, seed):
  """Direct linearize: its linear jaxpr computes what Part 4's does, and every
  equation in it touches a tangent (the primal work ran during tracing)."""
  note(str(program))
  xs = inputs_for(program, seed)
  w = weights_for(program, seed + 1)
  f = scalar_fun(program, OURS, w)
  out, jaxpr, consts, _ = sl.linearize_jaxpr(f, pack(xs))
  assert_trees_close(out[0], f(pack(xs)), tol(program))
  tangent_vars = set(jaxpr.invars)
  for eqn in jaxpr.eqns:
    assert any(type(x) is Var and x in tangent_vars for x in eqn.inputs), eqn
    tangent_vars.update(eqn.out_binders)
  ts = pack(tangents_like(xs, seed + 2))
  _, f_lin = sl.linearize(f, pack(xs))
  _, f_lin_old = adx.linearize(f, pack(xs))
  theirs = jax.jit(lambda: jax.linearize(scalar_fun(program, THEIRS, w), pack(xs))[1](ts))()
  assert_trees_close(f_lin(ts), theirs, tol(program))
  assert_trees_close(f_lin_old(ts), f_lin(ts), tol(program))


# --- Staging and jit ---------------------------------------------------------------------------

@few
@given(programs(), seeds)
def test_make_jaxpr_is_the_same_jaxpr(program, seed):
  """Staging in either design records the same equations, printed alike."""
  note(str(program))
  xs = inputs_for(program, seed)
  assert str(sl.make_jaxpr(program.ours)(*xs)) == str(adx.make_jaxpr(program.ours)(*xs))


@settings(max_examples=3)
@given(ad_programs(n_ops=(1, 4)), seeds)
def test_jit_under_every_transformation(program, seed):
  note(str(program))
  xs = inputs_for(program, seed)
  w = weights_for(program, seed + 1)
  f, f_j = scalar_fun(program, OURS, w), scalar_fun(program, THEIRS, w)
  x = pack(xs)
  three_ways(adx.jit(f)(x), sl.jit(f)(x), lambda: f_j(x), program)
  three_ways(adx.grad(adx.jit(f))(x), sl.grad(sl.jit(f))(x), lambda: jax.grad(f_j)(x), program)
  three_ways(adx.jit(adx.grad(f))(x), sl.jit(sl.grad(f))(x), lambda: jax.grad(f_j)(x), program)
  t = pack(tangents_like(xs, seed + 2))
  three_ways(adx.jvp(adx.jit(f), (x,), (t,)), sl.jvp(sl.jit(f), (x,), (t,)),
             lambda: jax.jvp(f_j, (x,), (t,)), program)
  xb = [np.stack([a, a * 0.5]) for a in xs]
  three_ways(adx.vmap(adx.jit(f))(pack(xb)), sl.vmap(sl.jit(lambda *a: f(pack(a))))(*xb),
             lambda: jax.vmap(f_j)(pack(xb)), program)


def test_jit_compiles_once_per_signature_and_runs_on_xla():
  calls = []

  def f(x):
    calls.append(1)
    return anp.sin(x) * 2.
  g = sl.jit(f)
  out = g(np.arange(3.))
  g(np.ones(3))
  assert type(out) is adx.Array and len(calls) == 1
  np.testing.assert_allclose(out, np.sin(np.arange(3.)) * 2)
  g(np.ones(4))
  assert len(calls) == 2


def test_jit_stays_compiled_under_grad():
  """The known half of jit's JVP runs as one xla_call bind; the tangent half
  is staged as another (Part 4's partial_eval_jaxpr rule for xla_call)."""
  f = sl.jit(lambda x: anp.sum(anp.sin(x) * x))
  with viz.record_dispatch() as rec:
    out = sl.grad(f)(np.arange(3.))
  np.testing.assert_allclose(out, jax.grad(lambda x: jnp.sum(jnp.sin(x) * x))(np.arange(3.)))
  handled = [(p.name, type(t).__name__) for t, p, *_ in rec.events]
  assert ("xla_call", "EvalTrace") in handled
  assert ("sin", "EvalTrace") not in handled   # sin ran inside XLA only


# --- Random programs with nested control flow ---------------------------------
# cond, switch, scan, fori_loop and while_loop nested in each other, closing
# over an outer value w (test_programs.cf_programs). Each example runs in
# both designs and in JAX, jitted. `reverse_mode=True` leaves out while loops.

CF_TOL = 1e-8
batch_axes = st.sampled_from([(0, 0), (0, None), (None, 0)])


def cf_three_ways(run, program):
  """`run(T, f)` with T one of adx, sl, jax and f the program in T's numpy:
  both designs agree with JAX (jitted)."""
  theirs = jax.jit(lambda: run(jax, program.theirs))()
  assert_trees_close(run(sl, program.ours), theirs, CF_TOL)
  assert_trees_close(run(adx, program.ours), theirs, CF_TOL)


def total(T, f, v):   # a scalar: <f(x, w), v>
  np_ = jnp if T is jax else anp
  return lambda x, w: np_.sum(f(x, w) * v)


def grad_x(T, f, v, w):
  """The gradient in x of <f(x, w), v>, with grad's signature in each design."""
  return T.grad(lambda x: total(T, f, v)(x, w))


@few
@given(cf_programs(), seeds)
def test_control_flow_make_jaxpr_and_jit(program, seed):
  """Both designs stage the same jaxpr, and jit runs it through XLA."""
  note(str(program))
  x, w = cf_inputs(seed)
  staged = [str(T.make_jaxpr(program.ours)(x, w)) for T in (sl, adx)]
  assert staged[0] == staged[1]
  cf_three_ways(lambda T, f: T.jit(f)(x, w), program)


@few
@given(cf_programs(), seeds, batch_axes)
def test_control_flow_forward_mode_and_vmap(program, seed, in_axes):
  note(str(program))
  x, w = cf_inputs(seed)
  tx, tw = cf_inputs(seed + 1)
  cf_three_ways(lambda T, f: T.jvp(f, (x, w), (tx, tw)), program)
  xb, wb = cf_inputs(seed + 2, in_axes)
  cf_three_ways(lambda T, f: T.vmap(f, in_axes)(xb, wb), program)
  cf_three_ways(lambda T, f: T.linearize(lambda x: f(x, w), x)[1](tx), program)


@fewer
@given(cf_programs(), seeds, batch_axes)
def test_control_flow_forward_compositions(program, seed, in_axes):
  note(str(program))
  xb, wb = cf_inputs(seed, in_axes)
  tb, ub = cf_inputs(seed + 1, in_axes)
  cf_three_ways(lambda T, f: T.jvp(T.vmap(f, in_axes), (xb, wb), (tb, ub)),
                program)
  cf_three_ways(lambda T, f: T.vmap(lambda *a: T.jvp(f, a[:2], a[2:]),
                                    in_axes * 2)(xb, wb, tb, ub), program)
  x, w = cf_inputs(seed + 2)
  cf_three_ways(lambda T, f: T.jvp(T.jit(f), (x, w), (w, x)), program)
  cf_three_ways(lambda T, f: T.vmap(T.jit(f), in_axes)(xb, wb), program)


# Under vmap of grad, a cond with a batched predicate runs every branch on
# every element, also where the branch was not taken and its residuals are
# the zeros that fill its slots: the inf or nan it computes there is dropped
# by select_n (as in JAX, where XLA does not warn).
@pytest.mark.filterwarnings(
    "ignore:(divide by zero|invalid value):RuntimeWarning")
@fewer
@given(cf_programs(reverse_mode=True), seeds, batch_axes)
def test_control_flow_reverse_mode(program, seed, in_axes):
  note(str(program))
  x, w = cf_inputs(seed)
  v, t = cf_inputs(seed + 1)
  cf_three_ways(lambda T, f: grad_x(T, f, v, w)(x), program)
  cf_three_ways(lambda T, f: T.grad(lambda x: T.jit(total(T, f, v))(x, w))(x),
                program)
  cf_three_ways(lambda T, f: T.jit(grad_x(T, f, v, w))(x), program)
  cf_three_ways(lambda T, f: T.jvp(grad_x(T, f, v, w), (x,), (t,)), program)
  xb, wb = cf_inputs(seed + 2, in_axes)
  cf_three_ways(lambda T, f: T.vmap(lambda x, w: grad_x(T, f, v, w)(x),
                                    in_axes)(xb, wb), program)


@settings(max_examples=3)
@given(cf_programs(depth=1, reverse_mode=True), seeds)
def test_control_flow_grad_of_grad(program, seed):
  note(str(program))
  x, w = cf_inputs(seed)
  v, u = cf_inputs(seed + 1)
  hvp = lambda T, f: T.grad(lambda y: (jnp if T is jax else anp).sum(
      grad_x(T, f, v, w)(y) * u))(x)
  cf_three_ways(hvp, program)


def test_while_loop_has_no_reverse_mode_in_either_design():
  f = lambda x: lax.while_loop(lambda c: c[0] < 3,
                               lambda c: (c[0] + 1, anp.sin(c[1])), (0, x))[1]
  for T in (adx, sl):
    with pytest.raises(WhileLoopReverseModeError, match="while_loop"):
      T.grad(f)(0.5)
  assert sl.linearize(f, 0.5)[1](1.) == adx.linearize(f, 0.5)[1](1.)


# --- Perturbation confusion: tags keep nested derivatives apart --------------------------------

def _outer(T):
  # d/dx [ x * d/dy (x * y + y) ] = d/dx [ x * (x + 1) ] = 2x + 1
  inner = lambda x: T.jvp(lambda y: x * y + y, (2.0,), (1.0,))[1]
  return T.jvp(lambda x: x * inner(x), (3.0,), (1.0,))[1]


def test_nested_jvp_keeps_perturbations_apart():
  assert _outer(sl) == _outer(adx) == float(_outer(jax)) == 7.0


def test_nested_grad_closing_over_outer_value():
  f = lambda T: T.grad(lambda x: x * T.grad(lambda y: x * anp.sin(y))(x))(0.7)
  expected = float(jax.grad(lambda x: x * jax.grad(lambda y: x * jnp.sin(y))(x))(0.7))
  assert np.isclose(f(sl), expected) and np.isclose(f(adx), expected)


def test_without_tags_perturbations_are_confused():
  """A JVPTrace that claims every JVPTracer as its own gets 6, not 7: the inner
  derivative takes x's perturbation for its own (so it is x + 1 + 2 = 6, a
  constant), and the outer one then sees x * 6."""
  class Confused(sl.JVPTrace):
    def to_primal_tangent_pair(self, x):
      if isinstance(x, sl.JVPTracer):
        return x.primal, x.tangent
      return x, ad.Zero.from_value(x)

  def confused_jvp(f, x, t):
    with sl.running(Confused(sl.current_trace())) as trace:
      with sl.set_current_trace(trace):
        out = f(sl.JVPTracer(trace, x, t))
      return trace.to_primal_tangent_pair(out)[1]

  inner = lambda x: confused_jvp(lambda y: x * y + y, 2.0, 1.0)
  assert confused_jvp(lambda x: x * inner(x), 3.0, 1.0) == 6.0   # wrong on purpose
  assert _outer(sl) == 7.0


def test_vmap_of_vmap_closing_over_the_outer_batch():
  xs, ys = np.arange(3.), np.arange(4.) * 10
  out = sl.vmap(lambda x: sl.vmap(lambda y: x * 2. + y)(ys))(xs)
  np.testing.assert_allclose(out, xs[:, None] * 2 + ys[None, :])


# --- Errors leave the context as it was ----------------------------------------------------------

def test_escaped_tracer_is_reported():
  saved = []
  sl.jvp(lambda x: saved.append(x) or x * 2., (1.,), (1.,))
  with pytest.raises(core.EscapedTracerError, match="escaped"):
    sl.jvp(lambda y: saved[0] * y, (1.,), (1.,))


def test_mixing_the_two_designs_says_so():
  for outer, inner in ((sl, adx), (adx, sl)):
    with pytest.raises(core.EscapedTracerError, match="one design at a time"):
      outer.vmap(lambda x: inner.jvp(anp.sin, (x,), (1.,)))(np.ones(2))


def test_vmap_with_no_or_unequal_sizes_says_so():
  with pytest.raises(ValueError, match=r"one mapped axis size, got \[2, 3\]"):
    sl.vmap(lambda x, y: x + y)(np.ones(2), np.ones(3))
  with pytest.raises(ValueError, match="got none"):
    sl.vmap(lambda x: x, in_axes=None)(np.ones(2))


def test_branching_on_a_staged_value_raises_and_restores_the_context():
  with pytest.raises(TypeError, match="DynamicJaxprTrace"):
    sl.jit(lambda x: x if x > 0 else -x)(1.0)
  assert sl.current_trace() is sl.eval_trace
  assert core.hooks.design is core.levels


CONVERSIONS = {"float": float, "int": int, "bool": bool,
               "if": lambda t: 1.0 if t else 0.0}


CONVERSIONS.update({"complex": lambda t: complex(t).real, "item": lambda t: t.item(),
                    "tolist": lambda t: t.tolist()})


@pytest.mark.parametrize("how", ["jit", "vmap", "jvp", "grad"])
@pytest.mark.parametrize("name", list(CONVERSIONS))
def test_concretizing_a_tracer_raises_where_jax_does(name, how):
  """Where JAX raises its ConcretizationTypeError (a TypeError), both designs
  raise a ConcretizationError that says what to do instead, and the context
  is restored; where JAX reads the known primal (bool, int, .item() under jvp
  and grad, so `if x > 0:` works there), so do we."""
  convert = CONVERSIONS[name]
  f = lambda x: x * convert(x)
  run = {"jit": lambda T: T.jit(f)(1.5),
         "vmap": lambda T: T.vmap(f)(np.ones(2)),
         "jvp": lambda T: T.jvp(f, (1.5,), (1.,)),
         "grad": lambda T: T.grad(f)(1.5)}[how]
  try:
    want = run(jax)
  except TypeError:
    want = None
  trace = {"jit": "DynamicJaxprTrace", "vmap": "BatchTrace", "jvp": "JVPTrace",
           "grad": "LinearizeTrace|JVPTrace"}[how]
  for T in (sl, adx):
    if want is None:
      with pytest.raises(core.ConcretizationError, match=f"({trace}).*lax.cond"):
        run(T)
    else:
      assert_trees_close(run(T), want, 1e-6)


def test_grad_rejects_integer_inputs_and_outputs_as_jax_does():
  for T in (sl, jax):
    with pytest.raises(TypeError, match="grad requires"):
      T.grad(lambda x: x * 2.)(3)
    with pytest.raises(TypeError, match="grad requires"):
      T.grad(lambda x: x > 0)(3.)
    with pytest.raises(TypeError, match="grad requires"):
      T.grad(lambda x: (x * 2.).astype(np.int32))(3.)


# --- The chapter's table of names ------------------------------------------------------------------

def _resolve(root, dotted):
  module, attr = dotted.rsplit(".", 1)
  return getattr(importlib.import_module(f"{root}.{module}"), attr)


@pytest.mark.parametrize("row", sl.JAX_NAMES, ids=lambda r: r[0])
def test_every_name_in_the_table_exists(row):
  _, old, new, theirs = row
  _resolve("autodidax", old)
  _resolve("autodidax", new)
  _resolve("jax._src", theirs)


def test_jax_itself_has_no_levels():
  """What the chapter says of JAX today: find_top_trace ignores its argument."""
  from jax._src import core as jcore
  with jcore.take_current_trace() as t:
    assert type(t).__name__ == "EvalTrace"
  assert jcore.find_top_trace(["anything"]) is jcore.find_top_trace([])


def test_dispatch_recording_and_stepper():
  with viz.record_dispatch() as rec:
    sl.vmap(lambda x: sl.jvp(lambda y: anp.sin(y), (x,), (1.,)))(np.arange(3.))
  lines = rec.lines()
  assert lines[0].startswith("sin(JVPTracer#") and "→ JVPTrace#" in lines[0]
  assert any(line.strip().startswith("sin(") and "EvalTrace" in line for line in lines)
  svg = rec.frame_graph(1).pipe(format="svg").decode()
  for label in ("JVPTrace", "BatchTrace", "EvalTrace", "handles this bind", "axis_size=3"):
    assert label in svg, label
  widget = rec.stepper()
  assert len(widget.children[1].options) == len(rec)


# --- Entry points for shard_map and custom rules ----------------------------------------

def test_shard_map_under_each_stackless_transformation():
  """shard_map traces its body with the running design (it raised "belongs to
  a level-based transformation" under every stackless transformation)."""
  mesh = adx.make_mesh((1,), ("data",))
  f = adx.shard_map(lambda x: lax.psum(x * 2., "data") + lax.axis_index("data"),
                    mesh=mesh, in_specs=adx.P("data"), out_specs=adx.P("data"))
  x = np.arange(4.)
  on_mesh = lambda v, *spec: adx.device_put(v, adx.sharding.NamedSharding(mesh, adx.P(*spec)))
  xs = on_mesh(x, "data")   # the mesh's axis is Explicit: the input's type says its split
  np.testing.assert_allclose(sl.jit(f)(xs), 2 * x)
  np.testing.assert_allclose(sl.grad(lambda v: f(v).sum())(xs), 2 * np.ones(4))
  np.testing.assert_allclose(sl.jvp(f, (xs,), (xs,))[1], 2 * x)
  np.testing.assert_allclose(sl.vmap(f)(on_mesh(np.stack([x, -x]), None, "data")),
                             np.stack([2 * x, -2 * x]))


def test_custom_vjp_bwd_calling_stackless_vjp():
  """bwd runs in the design that runs the backward pass, under vmap, scan
  and cond too."""
  @adx.custom_vjp
  def f(x):
    return anp.sin(x)

  def bwd(x, ct):
    return sl.vjp(anp.sin, x)[1](ct)
  f.defvjp(lambda x: (f(x), x), bwd)
  xs = np.arange(3.)
  np.testing.assert_allclose(sl.vmap(sl.grad(f))(xs), np.cos(xs))
  np.testing.assert_allclose(sl.grad(lambda x: sl.vmap(f)(x).sum())(xs), np.cos(xs))
  scan = lambda x: lax.scan(lambda c, xi: (c + f(xi), None), 0., x)[0]   # noqa: E731
  np.testing.assert_allclose(sl.grad(scan)(xs), np.cos(xs))
  np.testing.assert_allclose(sl.grad(lambda x: lax.cond(x > 0, f, anp.cos, x))(0.5),
                             np.cos(0.5))
