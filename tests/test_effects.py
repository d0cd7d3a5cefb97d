"""Side effects and state (autodidax.effects, callback, debug, state), against
JAX 0.10.2: what debug.print prints and in which order (captured stdout),
callbacks' values, Refs' values and gradients, printed jaxprs, and errors."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import Phase, given, note, settings
from hypothesis import strategies as st
from jax.experimental import io_callback as jax_io_callback

import autodidax as adx
import autodidax.numpy as anp
from autodidax import effects, lax, state
from autodidax.jaxpr import JaxprTypeError, typecheck_jaxpr

X3 = np.array([0.5, -1.25, 2.0], np.float32)


def printed(capsys, run):
  run()
  return capsys.readouterr().out


def both(capsys, make):
  """stdout of `make(adx-like namespace)` under autodidax and under JAX."""
  ours = printed(capsys, lambda: make(adx, adx.debug.print, lax))
  theirs = printed(capsys, lambda: make(jax, jax.debug.print, jax.lax))
  return ours, theirs


def _ordered_everywhere(m, p, l):
  """Ordered prints in a scan, a cond, a nested jit and a while loop."""
  inner = m.jit(lambda y: (p("inner {}", y, ordered=True), y * 2)[1])

  def body(c, x):
    p("body {} {}", c, x, ordered=True)
    c = l.cond(x > 0, lambda v: (p("pos {}", v, ordered=True), v)[1],
               lambda v: (p("neg {}", v, ordered=True), -v)[1], c + x)
    return inner(c), None

  def f(xs):
    p("start", ordered=True)
    c, _ = l.scan(body, np.float32(0), xs)
    c = l.while_loop(lambda c: c < 40., lambda c: (p("w {}", c, ordered=True), c * 3.)[1],
                     c + 1.)
    p("end {}", c, ordered=True)
    return c
  return m.jit(f)


PROGRAMS = {
    "eager": lambda m, p, l: p("x={x} y={}", 2.0, x=np.float32(1.5)),
    "jit": lambda m, p, l: m.jit(lambda x: (p("in {}", x), x * 2)[1])(X3),
    "vmap": lambda m, p, l: m.vmap(lambda x: (p("v {}", x), x)[1])(X3),
    "jit_vmap": lambda m, p, l: m.jit(m.vmap(lambda x: (p("v {}", x), x)[1]))(X3),
    "grad": lambda m, p, l: m.grad(lambda x: (p("g {}", x), x * x)[1])(np.float32(3.)),
    "jit_grad": lambda m, p, l: m.jit(m.grad(lambda x: (p("g {}", x), x * x)[1]))(
        np.float32(3.)),
    "ordered_jit": lambda m, p, l: m.jit(
        lambda x: (p("a {}", x, ordered=True), p("b {}", x + 1, ordered=True), x)[2])(X3),
    "scan_ordered": lambda m, p, l: m.jit(lambda xs: l.scan(
        lambda c, x: (p("s {} {}", c, x, ordered=True), (c + x, None))[1],
        np.float32(0), xs))(X3),
    "grad_checkpoint": lambda m, p, l: m.grad(m.checkpoint(
        lambda x: (p("c {}", x), x * x)[1]))(np.float32(3.)),
    "jit_grad_checkpoint": lambda m, p, l: m.jit(m.grad(m.checkpoint(
        lambda x: (p("c {}", x), x * x)[1])))(np.float32(3.)),
    "ordered_everywhere": lambda m, p, l: _ordered_everywhere(m, p, l)(X3),
    "ordered_across_calls": lambda m, p, l: [m.jit(lambda x: (p(s + " {}", x, ordered=True),
                                                              x)[1])(X3[i])
                                             for i, s in enumerate("aba")],
    "cond": lambda m, p, l: m.jit(lambda x: l.cond(
        x > 0, lambda y: (p("pos {}", y), y)[1], lambda y: (p("neg {}", y), -y)[1], x))(
        np.float32(-2.)),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_debug_print_prints_what_jax_prints_in_its_order(capsys, name):
  ours, theirs = both(capsys, PROGRAMS[name])
  assert ours == theirs and ours


# Formats and arguments, each printed eagerly, under jit, vmap and in a fori_loop.
FORMATS = {
    "literal braces after a field": lambda p, x: p("{x} = {{x}}", x=x),
    "literal braces first": lambda p, x: p("{{}} {}", x),
    "no placeholders": lambda p, x: p("value:"),
    "a tuple": lambda p, x: p("t={}", (x, x * 2)),
    "a list": lambda p, x: p("l={l}", l=[x, x + 1]),
    "a dict": lambda p, x: p("d={d}", d={"a": x, "b": x + 1}),
    "pytrees, positional": lambda p, x: p("{} and {}", {"a": x}, [x, (x,)]),
    "a string, positional": lambda p, x: p("{} {}", "name", x),
    "static keywords": lambda p, x: p("{n} {s} {x}", n=3, s="str", x=x),
    "a static float": lambda p, x: p("{} {}", 1.5, x),
    "indices": lambda p, x: p("{0} {0} {1}", x, x * 2),
    "an attribute": lambda p, x: p("{x.shape} {x.dtype}", x=x),
    "a format spec": lambda p, x: p("{x:.2f}", x=x[0]),
    "an element": lambda p, x: p("{x[1]}", x=x),
}


def _print_under(m, l, how, f):
  x = X3 / 3
  if how == "eager":
    return f(x)
  if how == "jit":
    return m.jit(lambda x: (f(x), x)[1])(x)
  if how == "vmap":
    return m.vmap(lambda x: (f(x), x)[1])(np.stack([x, x + 1]))
  return l.fori_loop(0, 2, lambda i, c: (f(c), c + 1)[1], x)   # fori_loop


@pytest.mark.parametrize("how", ["eager", "jit", "vmap", "fori_loop"])
@pytest.mark.parametrize("name", list(FORMATS))
def test_debug_print_formats_and_arguments_as_jax(capsys, name, how):
  ours, theirs = both(capsys, lambda m, p, l: _print_under(
      m, l, how, lambda x: FORMATS[name](p, x)))
  assert ours == theirs and ours


@pytest.mark.parametrize("how", ["jit", "eager", "fori_loop"])
def test_debug_print_uses_the_print_options_of_when_it_is_traced(capsys, how):
  """Traced inside np.printoptions(precision=2), run outside it: as JAX."""
  def make(m, p, l):
    f = m.jit(lambda x: (p("{} {x}", x, x=x * 2), p("{{}} {}", x), x)[2]) if how == "jit" else (
        lambda x: l.fori_loop(0, 1, lambda i, c: (p("{}", c), c)[1], x)) if how == "fori_loop" \
        else (lambda x: p("{}", x))
    with np.printoptions(precision=2):
      if how == "eager":
        return f(X3 / 3)
      traced = m.jit(f).lower(X3 / 3) if how == "fori_loop" else f.lower(X3 / 3)
    return traced.compile()(X3 / 3)
  ours, theirs = both(capsys, make)
  assert ours == theirs and "0.17" in ours


@pytest.mark.parametrize("args,kwargs,error", [
    (("{}", X3, X3), {}, ValueError),          # an unused positional argument
    (("{x}",), {"x": X3, "y": X3}, ValueError),   # an unused keyword argument
    (("value:", X3), {}, ValueError),           # arguments with no placeholder
    (("nothing",), {"x": X3}, ValueError),
    (("{} {}", X3), {}, IndexError),            # a missing one: str.format's error
    (("{y}",), {"x": X3}, KeyError),
    (("{{x}} = {x}",), {"x": X3}, AssertionError),   # JAX reads no placeholder
])
@pytest.mark.parametrize("jitted", [False, True])
def test_debug_print_refuses_the_formats_jax_refuses(capsys, args, kwargs, error, jitted):
  for m, p in ((adx, adx.debug.print), (jax, jax.debug.print)):
    run = lambda: p(*args, **kwargs)   # noqa: E731
    with pytest.raises(error) as e:
      m.jit(lambda: run())() if jitted and error is not AssertionError else run()
      if m is jax:
        jax.effects_barrier()
    if m is adx and error is ValueError:
      assert "Unused" in str(e.value) and "placeholder" in str(e.value), e.value
  capsys.readouterr()


def test_debug_print_under_jit_prints_from_the_compiled_program(capsys):
  f = adx.jit(lambda x: (adx.debug.print("run {}", x), x + 1)[1])
  text = f.lower(np.float32(1)).as_text()
  assert "stablehlo.custom_call @xla_ffi_python_cpu_callback" in text
  f(np.float32(1))
  f(np.float32(2))   # traced once, printed at every run
  assert capsys.readouterr().out == "run 1.0\nrun 2.0\n"
  assert f.trace_count == 1


def test_ordered_print_threads_a_token():
  f = lambda x: (adx.debug.print("a", ordered=True), adx.debug.print("b {}", x,
                                                                      ordered=True), x)[2]
  text = adx.jit(f).lower(np.float32(1)).as_text()
  calls = [l for l in text.splitlines() if "custom_call" in l]
  assert len(calls) == 2 and all("!stablehlo.token" in l for l in calls)
  first = calls[0].split("=")[0].strip()
  assert f"({first}" in calls[1]   # the second takes the first's token
  assert adx.make_jaxpr(f)(1.).effects == {effects.ordered_debug_effect}


def test_the_token_goes_through_control_flow_calls_and_the_runtime():
  text = _ordered_everywhere(adx, adx.debug.print, lax).lower(X3).as_text()
  main = text.split("func.func public @main")[1]
  assert main.startswith("(%token: !stablehlo.token {jax.token = true}")
  assert "-> (!stablehlo.token {jax.token = true}, tensor<f32>)" in main
  loops = [l for l in main.splitlines() if l.strip().startswith("}) : (")]
  assert len(loops) == 3 and all("!stablehlo.token" in l for l in loops)   # scan, cond, while
  assert "after_all" not in text   # one token, from the runtime, threaded all through
  call = next(l for l in main.splitlines() if "func.call" in l)
  assert "(!stablehlo.token, tensor<f32>) -> (!stablehlo.token, tensor<f32>)" in call
  from autodidax import runtime
  runtime._tokens.clear()
  adx.jit(lambda x: (adx.debug.print("", ordered=True), x)[1])(X3)
  first = runtime._tokens[runtime.default_platform()]
  adx.jit(lambda x: (adx.debug.print("", ordered=True), x)[1])(X3)
  assert runtime._tokens[runtime.default_platform()] is not first   # the next call's token


def test_effects_propagate_through_higher_order_primitives():
  pr = lambda x: (adx.debug.print("{}", x), x)[1]
  progs = [adx.jit(pr), lambda x: lax.cond(x > 0, pr, lambda y: y, x),
           lambda x: lax.while_loop(lambda c: c < 3., lambda c: pr(c) + 1., x),
           lambda x: lax.scan(lambda c, _: (pr(c), None), x, None, length=2)[0],
           adx.checkpoint(pr)]
  for f in progs:
    assert effects.debug_effect in adx.make_jaxpr(f)(1.).effects
  assert adx.make_jaxpr(lambda x: x * 2)(1.).effects == frozenset()


def test_typecheck_checks_declared_effects():
  j = adx.make_jaxpr(lambda x: (adx.debug.print("{}", x), x)[1])(1.).jaxpr
  bad = type(j)(j.constvars, j.invars, j.eqns, j.outvars, effects=())
  with pytest.raises(JaxprTypeError, match="effects"):
    typecheck_jaxpr(bad)
  typecheck_jaxpr(type(j)(j.constvars, j.invars, j.eqns, j.outvars,
                          effects={effects.debug_effect}))


def test_a_raising_callback_is_a_python_error_and_the_runtime_goes_on():
  def boom(x):
    raise ValueError("boom")
  with pytest.raises(ValueError, match="boom"):
    adx.jit(lambda x: (adx.debug.callback(boom, x), x)[1])(np.float32(1))
  assert float(adx.jit(lambda x: x + 1)(np.float32(1))) == 2.0
  # an ordered one, in a loop: the runtime's token still serves the next program
  sds = adx.ShapeDtypeStruct((), np.float32)
  with pytest.raises(ValueError, match="boom"):
    adx.jit(lambda x: lax.fori_loop(0, 2, lambda i, c: adx.io_callback(
        boom, sds, c, ordered=True), x))(np.float32(1))
  seen = []
  adx.jit(lambda x: adx.debug.callback(seen.append, x, ordered=True))(np.float32(2))
  assert seen == [2.0]


def _sin_cb(m, x, **kw):
  return m.pure_callback(np.sin, m.ShapeDtypeStruct(x.shape, x.dtype), x, **kw)


@pytest.mark.parametrize("method", ["sequential", "expand_dims", "broadcast_all"])
def test_pure_callback_values_and_vmap_match_jax(method):
  f = lambda m: lambda x: _sin_cb(m, x, vmap_method=method) * 2
  np.testing.assert_allclose(f(adx)(X3), jax.jit(f(jax))(X3), rtol=1e-6)
  np.testing.assert_allclose(adx.jit(f(adx))(X3), jax.jit(f(jax))(X3), rtol=1e-6)
  np.testing.assert_allclose(adx.vmap(f(adx))(X3), jax.vmap(f(jax))(X3), rtol=1e-6)
  np.testing.assert_allclose(adx.jit(adx.vmap(f(adx)))(X3), jax.vmap(f(jax))(X3), rtol=1e-6)


def test_io_callback_values_vmap_and_errors():
  seen = []
  cb = lambda x: (seen.append(float(x)), x * 2)[1]
  sds = adx.ShapeDtypeStruct((), np.float32)
  assert float(adx.jit(lambda x: adx.io_callback(cb, sds, x))(np.float32(3))) == 6.0
  jsds = jax.ShapeDtypeStruct((), np.float32)
  assert float(jax.jit(lambda x: jax_io_callback(cb, jsds, x))(np.float32(3))) == 6.0
  np.testing.assert_allclose(adx.vmap(lambda x: adx.io_callback(cb, sds, x))(X3), X3 * 2)
  with pytest.raises(ValueError, match="ordered IO callback"):
    adx.vmap(lambda x: adx.io_callback(cb, sds, x, ordered=True))(X3)
  with pytest.raises(ValueError, match="IO callbacks do not support JVP"):
    adx.jvp(lambda x: adx.io_callback(cb, sds, x), (np.float32(1),), (np.float32(1),))
  with pytest.raises(ValueError, match="Pure callbacks do not support JVP"):
    adx.jvp(lambda x: _sin_cb(adx, x), (np.float32(1),), (np.float32(1),))
  with pytest.raises(NotImplementedError, match="vmap_method"):
    adx.vmap(lambda x: _sin_cb(adx, x))(X3)
  assert effects.ordered_io_effect in adx.make_jaxpr(
      lambda x: adx.io_callback(cb, sds, x, ordered=True))(np.float32(1)).effects


# --- Refs ------------------------------------------------------------------------------------

def _ref_prog(m, l):
  def f(x):
    r = m.new_ref(x)
    r[...] += 1.
    r[0] = x[1] * 3.
    y = r[...]
    acc = m.new_ref(jnp.zeros(()) if m is jax else anp.zeros((), np.float32))

    def body(i, c):
      acc[...] += r[i] * c
      return c * 2.
    l.fori_loop(0, 3, body, np.float32(1))
    l.cond(y[2] > 0, lambda: acc.__setitem__(..., acc[...] * 2.), lambda: None)
    return y * acc[...]
  return f


def test_ref_jaxpr_prints_as_jax_does():
  f = lambda x: (lambda r: (r.__setitem__(..., r[...] + 1.), r.__setitem__(0, 3.),
                            r[...])[2])(adx.new_ref(x))
  text = str(adx.make_jaxpr(f)(X3))
  for line in ("b:Ref{f32[3]} = new_ref a", "c:f32[3] <- b[...]", "b[...] <- d",
               "b[0] <- 3.0", "e:f32[3] <- b[...]"):
    assert line in text, text
  assert adx.make_jaxpr(f)(X3).effects == {effects.internal_mutable_array_effect}


def test_discharge_makes_a_pure_jaxpr():
  j = adx.make_jaxpr(_ref_prog(adx, lax))(X3).jaxpr
  d = state.discharge_if_stateful(j)
  typecheck_jaxpr(d)
  assert d.effects == frozenset()
  assert "Ref" not in str(d)


@pytest.mark.parametrize("transform", ["eager", "jit", "vmap_jit", "grad_jit", "jvp_jit",
                                       "linearize_jit"])
def test_refs_with_control_flow_agree_with_jax(transform):
  ours, theirs = _ref_prog(adx, lax), _ref_prog(jax, jax.lax)
  xs = np.stack([X3, -X3 * 0.5]).astype(np.float32)
  if transform == "eager":
    want, got = theirs(X3), ours(X3)
  elif transform == "jit":
    want, got = jax.jit(theirs)(X3), adx.jit(ours)(X3)
  elif transform == "vmap_jit":
    # JAX can't vmap a cond with state effects; its rows, one at a time:
    want, got = np.stack([jax.jit(theirs)(x) for x in xs]), adx.vmap(adx.jit(ours))(xs)
  elif transform == "grad_jit":
    want = jax.grad(lambda x: theirs(x).sum())(X3)
    got = adx.grad(lambda x: adx.jit(ours)(x).sum())(X3)
  elif transform == "jvp_jit":
    want = jax.jvp(theirs, (X3,), (X3,))[1]
    got = adx.jvp(adx.jit(ours), (X3,), (X3,))[1]
  else:
    want = jax.linearize(theirs, X3)[1](X3)
    got = adx.linearize(adx.jit(ours), X3)[1](X3)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)


def test_ref_misuse_errors():
  with pytest.raises(ValueError, match="mutable array references cannot be returned"):
    adx.jit(lambda x: adx.new_ref(x))(np.float32(1))
  with pytest.raises(TypeError, match="shape"):
    adx.make_jaxpr(lambda x: adx.new_ref(x).__setitem__(..., anp.zeros(2)))(X3)
  with pytest.raises(IndexError, match="out of bounds"):
    adx.new_ref(X3)[3]


def _straight(m):
  def f(x):
    r = m.new_ref(x)
    r[...] += x * x
    r[1] = r[0] * 2.
    acc = m.new_ref(np.zeros((), np.float32))
    for i in range(3):
      acc[...] += r[i] * (i + 1.)
    return r[...] * acc[...]
  return f


@pytest.mark.parametrize("transform", ["jvp", "vmap", "grad", "linearize", "vjp"])
def test_refs_without_jit_are_discharged_as_the_function_runs(transform):
  ours, theirs = _straight(adx), _straight(jax)
  xs = np.stack([X3, -X3 * 0.5]).astype(np.float32)
  if transform == "jvp":
    want, got = (jax.jvp(theirs, (X3,), (X3 + 1,)),
                 adx.jvp(ours, (X3,), (X3 + 1,)))
  elif transform == "vmap":
    want, got = jax.vmap(theirs)(xs), adx.vmap(ours)(xs)
  elif transform == "grad":
    want = jax.grad(lambda x: theirs(x).sum())(X3)
    got = adx.grad(lambda x: ours(x).sum())(X3)
  elif transform == "linearize":
    want = jax.linearize(theirs, X3)[1](X3)
    got = adx.linearize(ours, X3)[1](X3)
  else:
    want = jax.vjp(theirs, X3)[1](X3)
    got = adx.vjp(ours, X3)[1](X3)
  for w, g in zip(jax.tree_util.tree_leaves(want), jax.tree_util.tree_leaves(got)):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6)


def test_a_ref_of_a_transformation_in_a_loop_body_is_discharged_into_its_carry():
  # grad's Ref (a box holding grad's tracers) in a fori_loop's body and a cond:
  # the loop is bound discharged, with or without jit (tests/test_state_transforms.py
  # has every loop and transformation)
  want = jax.grad(lambda x: _ref_prog(jax, jax.lax)(x).sum())(X3)
  for wrap in (lambda f: f, adx.jit):
    got = adx.grad(lambda x: wrap(_ref_prog(adx, lax))(x).sum())(X3)
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_pictures_of_tokens_and_discharge_say_what_they_show():
  from autodidax import viz
  f = lambda x: (adx.debug.print("a", ordered=True), adx.debug.print("b {}", x, ordered=True),
                 x)[2]
  g = viz.token_graph(adx.jit(f).lower(np.float32(1)).as_text())
  assert "2 host callbacks take the token" in g.name
  assert g.source.count('label=token') == 3   # the runtime's token, callback, callback, return
  bump = lambda x: (lambda r: (r.__setitem__(0, 3.), r[...] * x)[1])(adx.new_ref(x))
  panes = viz.discharge_graph(bump, X3).panes
  assert "new_ref" in panes["with a Ref"].name and "writes" in panes["with a Ref"].source
  assert "Ref" not in panes["discharged"].name
  frames = viz.discharge_frames(adx.make_jaxpr(bump)(X3).jaxpr)
  assert len(frames) == 4 and frames[1][0].splitlines()[1].startswith("▶ b[0] <- 3.0")
  assert "Ref" not in frames[-1][1] and "dynamic_update_slice" in frames[-1][1]


# --- Refs that a jit, checkpoint, custom_jvp/vjp or shard_map body closes over ------------------

def _closing_over(m, kind):
  def f(x):
    r = m.new_ref(x)
    if kind == "checkpoint":
      g = m.checkpoint(lambda y: (r.__setitem__(..., r[...] + y), r[...] * 2.)[1])
      return g(x)
    if kind == "nested_jit":
      m.jit(lambda: r.__setitem__(..., r[...] + 1.))()
      return r[...]
    if kind == "jit_in_scan":   # a jit body writing a Ref, inside a loop
      def body(c, _):
        m.jit(lambda: r.__setitem__(..., r[...] * c))()
        return c + 1., None
      (m.lax if m is jax else lax).scan(body, np.float32(1.), None, length=3)
      return r[...]
    g = m.custom_vjp(lambda y: r[...] * y)   # reads only
    g.defvjp(lambda y: (g(y), y), lambda y, ct: (ct * 5.,))
    return g(x)
  return f


@pytest.mark.parametrize("kind", ["checkpoint", "nested_jit", "jit_in_scan", "custom_vjp"])
def test_refs_closed_over_by_calls_are_discharged_as_jax_does(kind):
  x = np.float32(1.5)
  want = jax.jit(_closing_over(jax, kind))(x)
  np.testing.assert_allclose(adx.jit(_closing_over(adx, kind))(x), want, rtol=1e-6)
  if kind == "checkpoint":   # JAX's 4.0 for x = 1
    assert float(adx.jit(_closing_over(adx, kind))(np.float32(1.))) == 4.0
    d = state.discharge_if_stateful(adx.make_jaxpr(_closing_over(adx, kind))(x).jaxpr)
    assert "Ref" not in str(d) and d.effects == frozenset()


def test_custom_rules_read_a_closed_over_ref_and_refuse_a_write():
  def f(x):
    r = adx.new_ref(np.float32(3.))
    g = adx.custom_jvp(lambda y: r[...] * y)
    g.defjvp(lambda p, t: (r[...] * p[0], t[0] * 5.))   # the rule's derivative, not 3
    return g(x)
  assert float(adx.jit(f)(np.float32(2.))) == 6.0
  assert float(adx.jit(adx.grad(f))(np.float32(2.))) == 5.0

  def writes(x):
    r = adx.new_ref(x)
    g = adx.custom_jvp(lambda y: (r.__setitem__(..., r[...] + y), r[...])[1])
    g.defjvp(lambda p, t: (g(*p), t[0]))
    return g(x)
  with pytest.raises(NotImplementedError, match="writes a Ref it closes over"):
    adx.jit(writes)(np.float32(1.))


def test_a_shard_map_body_writes_a_replicated_ref():
  from autodidax.sharding import PartitionSpec as P
  mesh = adx.make_mesh((len(adx.devices()),), ("i",))
  n = mesh.size

  def f(x):
    r = adx.new_ref(np.zeros(3, np.float32))
    body = lambda y: (r.__setitem__(..., r[...] + 1.), y * 2.)[1]
    out = adx.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i"))(x)
    return out, r[...]
  x = adx.device_put(np.arange(n, dtype=np.float32), adx.sharding.NamedSharding(mesh, P("i")))
  out, r = adx.jit(f)(x)
  np.testing.assert_allclose(out, np.arange(n) * 2.)
  np.testing.assert_allclose(r, np.ones(3))


def test_a_jit_closing_over_an_eager_ref_updates_it_as_jax_does():
  for m in (adx, jax):
    r = m.new_ref(np.float32(1.))
    m.jit(lambda: r.__setitem__(..., r[...] + 1.))()
    assert float(r[...]) == 2.0


# --- Random Ref programs, against JAX --------------------------------------------------------

def _ops(depth=2):
  """A strategy for a list of operations on a Ref r of f32[3]: reads, writes
  and addupdate, straight or inside fori_loop and cond."""
  k, c = st.integers(0, 2), st.sampled_from([-1.5, -0.5, 0.5, 2.0])
  leaf = st.one_of(st.tuples(st.just("scale"), k, c), st.tuples(st.just("mix"), k, k),
                   st.tuples(st.just("acc"), k, c), st.tuples(st.just("swap"), k, k),
                   st.tuples(st.just("slice"), c))
  if depth == 0:
    return st.lists(leaf, min_size=1, max_size=3)
  inner = _ops(depth - 1)
  nested = st.one_of(st.tuples(st.just("fori"), st.integers(0, 3), inner),
                     st.tuples(st.just("cond"), k, inner, inner))
  return st.lists(st.one_of(leaf, leaf, nested), min_size=1, max_size=4)


def _run_ops(m, l, r, ops, i=0.):
  """Apply `ops` to the Ref `r` (`i`: the loop index, as a float)."""
  for op in ops:
    if op[0] == "scale":
      r[op[1]] = r[op[1]] * op[2]
    elif op[0] == "mix":
      r[op[1]] = (l.sin if m is adx else jnp.sin)(r[op[2]]) + r[op[1]] * i
    elif op[0] == "acc":
      r[...] += op[2] * r[op[1]]
    elif op[0] == "swap":   # both read first: r[k], r[j] = r[j], r[k]
      a, b = r[op[1]], r[op[2]]
      r[op[1]], r[op[2]] = b, a
    elif op[0] == "slice":
      r[1:] = r[:2] * op[1]
    elif op[0] == "fori":
      def body(j, c, ops=op[2]):
        _run_ops(m, l, r, ops, (l if m is adx else jax.lax).convert_element_type(
            j, np.float32))
        return c
      (lax if m is adx else jax.lax).fori_loop(0, op[1], body, np.float32(0.))
    else:
      (lax if m is adx else jax.lax).cond(
          r[op[1]] > 0, lambda: _run_ops(m, l, r, op[2], i), lambda: _run_ops(m, l, r, op[3], i))


def _ref_program(m, ops):
  def f(x):
    r = m.new_ref(x)
    _run_ops(m, lax, r, ops)
    return r[...] * x
  return f


@settings(max_examples=12, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(ops=_ops())
def test_random_ref_programs_agree_with_jax(ops):
  note(repr(ops))
  ours, theirs = _ref_program(adx, ops), _ref_program(jax, ops)
  xs = np.array([[0.3, -0.7, 1.1], [-1.2, 0.4, 0.9]], np.float32)
  close = lambda got, want: np.testing.assert_allclose(np.asarray(got), np.asarray(want),
                                                       rtol=2e-5, atol=2e-5)
  close(adx.jit(ours)(xs[0]), jax.jit(theirs)(xs[0]))
  close(ours(xs[0]), jax.jit(theirs)(xs[0]))   # eagerly: Ref boxes
  # JAX can't vmap a cond with state effects: its rows, one at a time
  close(adx.vmap(adx.jit(ours))(xs), np.stack([jax.jit(theirs)(x) for x in xs]))
  w = np.array([1., -2., 0.5], np.float32)
  jvp = jax.jit(lambda x, t: jax.jvp(theirs, (x,), (t,))[1])
  close(adx.jvp(adx.jit(ours), (xs[0],), (w,))[1], jvp(xs[0], w))
  # JAX's reverse mode can't partially evaluate a cond with state effects: the
  # gradient from its forward mode, one basis vector at a time
  close(adx.grad(lambda x: (adx.jit(ours)(x) * w).sum())(xs[1]),
        [(jvp(xs[1], e) * w).sum() for e in np.eye(3, dtype=np.float32)])
