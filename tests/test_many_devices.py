"""Many devices: named axes and collectives under vmap (here, on one device),
and everything that needs 8 devices in a subprocess of its own.

XLA's CPU client has as many devices as XLA_FLAGS says when it starts, and
pytest's process (or an xdist worker) may have started one already. So the
multi-device cases (tests/many_devices_cases.py) run in one fresh process
with XLA_FLAGS=--xla_force_host_platform_device_count=8, started once for
the module, and each case becomes a test here.
"""
import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jax import lax as jlax

import autodidax as adx
import autodidax.numpy as anp
from autodidax import batching, core, lax, parallel, viz

ROOT = Path(__file__).resolve().parents[1]
CASES = Path(__file__).with_name("many_devices_cases.py")


# --- The multi-device cases, in their own process ------------------------------------------

def _case_names() -> list[str]:
  tree = ast.parse(CASES.read_text())
  return [f.name for f in tree.body if isinstance(f, ast.FunctionDef)
          and any(isinstance(d, ast.Name) and d.id == "case" for d in f.decorator_list)]


@pytest.fixture(scope="module")
def multi_device_results():
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8",
             JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
  env.pop("JAX_ENABLE_X64", None)
  proc = subprocess.run([sys.executable, str(CASES)], cwd=ROOT, env=env, capture_output=True,
                        text=True, timeout=900)
  lines = proc.stdout.strip().splitlines()
  assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
  return json.loads(lines[-1])


@pytest.mark.parametrize("name", _case_names())
def test_on_8_devices(multi_device_results, name):
  result = multi_device_results.get(name, "did not run")
  assert result == "ok", result


def test_import_starts_no_xla_client():
  """A notebook sets XLA_FLAGS after `import autodidax`: nothing may have
  started the runtime (or imported jax) by then."""
  code = ("import sys, autodidax, autodidax.sharding, autodidax.shard_map\n"
          "from autodidax import runtime\n"
          "assert 'jax' not in sys.modules, 'jax imported'\n"
          "assert runtime.client.cache_info().currsize == 0\n"
          "import os; os.environ['XLA_FLAGS'] = '--xla_force_host_platform_device_count=4'\n"
          "print(len(autodidax.devices()))")
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
  assert out.returncode == 0 and out.stdout.split()[-1] == "4", out.stdout + out.stderr


# --- Collectives under vmap, against JAX -------------------------------------------------------

def _close(a, b):
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-10, atol=1e-12)


RING = [(0, 1), (1, 2), (2, 3), (3, 0)]
PROGRAMS = {   # name: f(L) -> the per-element function, L = (lax module)
    "psum": lambda L: lambda x: L.psum(x, "i"),
    "psum of a constant": lambda L: lambda x: L.psum(3., "i") * x,
    "psum(1) is the size": lambda L: lambda x: x * L.psum(1, "i"),
    "pmean": lambda L: lambda x: L.pmean(x, "i"),
    "pmax": lambda L: lambda x: L.pmax(x, "i"),
    "pmin": lambda L: lambda x: L.pmin(x, "i"),
    "all_gather": lambda L: lambda x: L.all_gather(x, "i"),
    "all_gather axis 1": lambda L: lambda x: L.all_gather(x, "i", axis=1),
    "all_gather tiled": lambda L: lambda x: L.all_gather(x, "i", tiled=True),
    "ppermute": lambda L: lambda x: L.ppermute(x, "i", RING),
    "axis_index": lambda L: lambda x: x * L.axis_index("i"),
    "psum_scatter": lambda L: lambda x: L.psum_scatter(x[:, 0], "i"),
    "psum_scatter tiled": lambda L: lambda x: L.psum_scatter(
        L.psum(x, "i")[:, :2].reshape(-1), "i", tiled=True),
}


@pytest.mark.parametrize("name", PROGRAMS)
@pytest.mark.parametrize("in_axes", [0, 1])
def test_collective_under_vmap(name, in_axes):
  x = np.random.default_rng(0).normal(size=(4, 4, 3))
  x = np.moveaxis(x, 0, in_axes).copy()
  ours = adx.vmap(PROGRAMS[name](lax), in_axes=in_axes, axis_name="i")(x)
  theirs = jax.vmap(PROGRAMS[name](jlax), in_axes=in_axes, axis_name="i")(x)
  _close(ours, theirs)


@pytest.mark.parametrize("name", ["psum", "pmean", "all_gather", "all_gather tiled",
                                  "ppermute", "psum_scatter"])
def test_grad_of_collective_under_vmap(name):
  """The transposes: grad inside the vmap that binds the name."""
  x = np.random.default_rng(1).normal(size=(4, 4, 3))
  w = np.random.default_rng(2).normal(size=(4,))

  def loss(L, f):
    return lambda v, c: (c * anp.sin(f(v)) if L is lax else c * jnp.sin(f(v))).sum()
  ours = adx.vmap(adx.grad(loss(lax, PROGRAMS[name](lax))), axis_name="i")(x, w)
  theirs = jax.vmap(jax.grad(loss(jlax, PROGRAMS[name](jlax))), axis_name="i")(x, w)
  _close(ours, theirs)


@given(st.integers(1, 5), st.integers(1, 3), st.integers(0, 1), st.sampled_from(
    ["psum", "pmax", "all_gather", "ppermute", "pmean"]))
def test_collectives_agree_with_jax_on_random_shapes(n, m, axis, name):
  x = np.random.default_rng(n * 10 + m).normal(size=(n, m, 2))
  perm = [(k, (k + 1) % n) for k in range(n)]
  make = {"psum": lambda L: lambda v: L.psum(v, "i"),
          "pmax": lambda L: lambda v: L.pmax(v, "i"),
          "pmean": lambda L: lambda v: L.pmean(v, "i"),
          "all_gather": lambda L: lambda v: L.all_gather(v, "i", axis=axis),
          "ppermute": lambda L: lambda v: L.ppermute(v, "i", perm)}[name]
  _close(adx.vmap(make(lax), axis_name="i")(x), jax.vmap(make(jlax), axis_name="i")(x))


def test_nested_names_and_tuples():
  x = np.arange(24.).reshape(2, 3, 4)
  for make in [lambda L: lambda v: L.psum(v, ("i", "j")),
               lambda L: lambda v: L.pmean(v, "i") - L.pmax(v, "j"),
               lambda L: lambda v: v * L.axis_index(("i", "j")),
               lambda L: lambda v: v * L.axis_index(("j", "i"))]:
    nested = lambda L, V: V(V(make(L), axis_name="j"), axis_name="i")
    _close(nested(lax, adx.vmap)(x), nested(jlax, jax.vmap)(x))


def test_inner_name_shadows_outer():
  x = np.arange(6.).reshape(2, 3)
  f = lambda L, V: V(V(lambda v: L.psum(v, "i"), axis_name="i"), axis_name="i")
  _close(f(lax, adx.vmap)(x), f(jlax, jax.vmap)(x))


def test_collectives_inside_jit_and_control_flow_under_vmap():
  x = np.random.default_rng(3).normal(size=(4, 5))
  cases = [
      lambda L, J: J(lambda v: L.psum(v, "i")),
      lambda L, J: lambda v: J(lambda u: L.pmean(u * 2., "i"))(v) + 1.,
      lambda L, J: lambda v: (L if L is jlax else lax).scan(
          lambda c, u: (c + L.psum(u, "i"), c), 0., v)[0],
      lambda L, J: lambda v: (L if L is jlax else lax).fori_loop(
          0, 3, lambda k, c: c + L.psum(c, "i"), v),
      lambda L, J: lambda v: (L if L is jlax else lax).cond(
          v.sum() > 0, lambda u: L.psum(u, "i"), lambda u: -u, v),
  ]
  for make in cases:
    _close(adx.vmap(make(lax, adx.jit), axis_name="i")(x),
           jax.vmap(make(jlax, jax.jit), axis_name="i")(x))


def test_make_jaxpr_shows_the_collective_became_array_code():
  jaxpr = adx.make_jaxpr(adx.vmap(lambda x: lax.psum(x, "i"), axis_name="i"))(np.ones(3))
  names = [e.primitive.name for e in jaxpr.eqns]
  assert "reduce_sum" in names and "psum" not in names
  inner = adx.make_jaxpr(lambda x: adx.vmap(lambda v: lax.psum(v, "i") * x,
                                            axis_name="i")(np.ones(3)))(2.)
  assert "psum" not in str(inner)


def test_jit_retraces_for_another_axis_size():
  """pmean divides by the axis size: a trace under size 4 must not be reused
  under size 2 (the bound axes are part of jit's cache key)."""
  f = adx.jit(lambda v: lax.pmean(v, "i"))
  a = adx.vmap(f, axis_name="i")(np.arange(4.))
  b = adx.vmap(f, axis_name="i")(np.arange(2.))
  np.testing.assert_allclose(a, [1.5] * 4)
  np.testing.assert_allclose(b, [0.5] * 2)


def test_pmax_and_pmin_have_no_derivative_as_in_jax():
  """pmax and pmin are not linear, and JAX 0.10 registers no JVP for them:
  grad raises NotImplementedError, ours naming the primitive."""
  x = np.array([1., 3., 3., 2.])
  for ours, theirs in [(lax.pmax, jlax.pmax), (lax.pmin, jlax.pmin)]:
    with pytest.raises(NotImplementedError, match=f"'{ours.__name__}'"):
      adx.vmap(adx.grad(lambda v: ours(v, "i")), axis_name="i")(x)
    with pytest.raises(NotImplementedError):
      jax.vmap(jax.grad(lambda v: theirs(v, "i")), axis_name="i")(x)


# --- Errors a learner can cause -----------------------------------------------------------------

def test_unbound_axis_name_is_a_name_error_like_jax():
  with pytest.raises(NameError, match="unbound axis name: k"):
    lax.psum(1., "k")
  with pytest.raises(NameError, match="unbound axis name: k"):
    jlax.psum(1., "k")
  with pytest.raises(NameError, match="unbound axis name: k.*vmap.*axis_name='k'"):
    adx.make_jaxpr(lambda x: lax.all_gather(x, "k"))(1.)
  with pytest.raises(NameError, match="unbound axis name: j"):
    adx.vmap(lambda x: lax.psum(x, ("i", "j")), axis_name="i")(np.ones(3))
  with pytest.raises(NameError, match="unbound axis name: i"):
    lax.axis_index("i")


def test_bad_collective_arguments_say_what_is_wrong():
  with pytest.raises(ValueError, match="not a permutation"):
    adx.vmap(lambda x: lax.ppermute(x, "i", [(0, 1), (1, 1)]), axis_name="i")(np.ones(3))
  with pytest.raises(ValueError, match="psum_scatter: dimension 0 of an array of shape \\(2,\\) must be equal to the size 3"):
    adx.vmap(lambda x: lax.psum_scatter(x, "i"), axis_name="i")(np.ones((3, 2)))
  with pytest.raises(NotImplementedError, match="one axis at a time"):
    lax.ppermute(1., ("i", "j"), [(0, 1)])


def test_mesh_errors_without_devices():
  with pytest.raises(ValueError, match="needs 64 devices.*XLA_FLAGS"):
    adx.make_mesh((8, 8), ("a", "b"))
  mesh = adx.make_mesh((1,), ("data",))
  with pytest.raises(ValueError, match="names the axis 'model'"):
    adx.sharding.NamedSharding(mesh, adx.P("model"))
  with pytest.raises(ValueError, match="rank 1"):
    adx.shard_map(lambda x: x, mesh=mesh, in_specs=adx.P("data", None),
                  out_specs=adx.P())(np.ones(3))


def test_shard_map_on_a_one_device_mesh():
  """On one device shard_map runs too: every collective is over one device."""
  mesh = adx.make_mesh((1,), ("data",))
  f = adx.shard_map(lambda x: lax.psum(x * 2., "data") + lax.axis_index("data"), mesh=mesh,
                    in_specs=adx.P("data"), out_specs=adx.P("data"))
  x = np.arange(4.)
  xs = adx.device_put(x, adx.sharding.NamedSharding(mesh, adx.P("data")))
  np.testing.assert_allclose(f(xs), 2 * x)
  np.testing.assert_allclose(adx.grad(lambda v: f(v).sum())(xs), 2 * np.ones(4))
  assert adx.flops(f)(xs).total == 8   # a multiply and an add per element, one device


@pytest.mark.parametrize("value", [1.5, 2, True, np.float32(1.5), np.arange(3)])
@pytest.mark.parametrize("where", ["default", "device", "named"])
def test_device_put_keeps_a_python_scalars_weak_type_like_jax(value, where):
  """device_put of a Python scalar is weakly typed, as in JAX, wherever it goes:
  so adding a float32 array keeps float32."""
  mesh, jmesh = adx.make_mesh((1,), ("x",)), jax.make_mesh((1,), ("x",))
  to = {"default": (None, None), "device": (adx.devices()[0], jax.devices()[0]),
        "named": (adx.sharding.NamedSharding(mesh, adx.P()),
                  jax.NamedSharding(jmesh, jax.P()))}[where]
  ours, theirs = adx.device_put(value, to[0]), jax.device_put(value, to[1])
  assert adx.typeof(ours).weak_type == jax.typeof(theirs).weak_type, (ours, theirs)
  f32 = np.ones(3, np.float32)
  assert (adx.typeof(ours + f32).dtype == jax.typeof(theirs + f32).dtype
          or isinstance(value, np.ndarray)), (adx.typeof(ours + f32),
                                                      jax.typeof(theirs + f32))
  np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs))


# --- Pictures -------------------------------------------------------------------------------------

def test_sharding_picture_and_collective_dataflow():
  mesh = adx.make_mesh((1,), ("data",))
  g = viz.sharding_graph((4, 6), adx.sharding.NamedSharding(mesh, adx.P("data")))
  svg = g.pipe(format="svg").decode()
  assert "dev 0" in svg and "P(&#39;data&#39;)" in svg
  for kind, want in [("psum", "device 2 gets x0 + x1 + x2 + x3"),
                     ("all_gather", "device 0 gets [x0, x1, x2, x3]"),
                     ("psum_scatter", "device 1 gets x0[1] + x1[1]"),
                     ("ppermute", "device 0 gets x3")]:
    assert want in viz.collective_graph(kind).name, (kind, viz.collective_graph(kind).name)


def test_named_vmap_shows_its_name_on_the_stack():
  seen = {}

  def f(x):
    seen["stack"] = tuple(core.trace_stack)
    return x

  adx.vmap(f, axis_name="rows")(np.ones(3))
  assert seen["stack"][1].trace_type is batching.NamedBatchTrace
  svg = viz.stack_graph(seen["stack"]).pipe(format="svg").decode()
  assert "axis_name=&#39;rows&#39;" in svg
  assert parallel.bound_axes() == ()
