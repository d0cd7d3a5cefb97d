"""The multi-device cases of test_many_devices.py, run in their own process.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python tests/many_devices_cases.py

The flag must be set before any XLA client starts, so these run here, in a
fresh process, rather than in pytest's (where other tests already started
a one-device client). Each case compares autodidax with JAX (its Auto axis
types) on the same program; the script prints one JSON object, {case: "ok"
or what went wrong}, as its last line.
"""
import json
import os
import re
import sys
import traceback
from pathlib import Path

assert "--xla_force_host_platform_device_count=8" in os.environ.get("XLA_FLAGS", ""), \
    "run with XLA_FLAGS=--xla_force_host_platform_device_count=8"

import numpy as np  # noqa: E402

import autodidax as adx  # noqa: E402
import autodidax.numpy as anp  # noqa: E402
from autodidax import lax, spmd  # noqa: E402
from autodidax.sharding import NamedSharding, P  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax as jlax  # noqa: E402

AUTO = jax.sharding.AxisType.Auto
ROOT = Path(__file__).resolve().parents[1]
RNG = np.random.default_rng(0)
CASES = {}


def case(fn):
  CASES[fn.__name__] = fn
  return fn


def close(a, b, rtol=1e-5, atol=1e-5):
  a, b = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
  assert len(a) == len(b), f"{len(a)} outputs against JAX's {len(b)}"
  for x, y in zip(a, b):
    x, y = np.asarray(x), np.asarray(y)
    assert x.shape == y.shape, f"shape {x.shape}, JAX's {y.shape}"
    np.testing.assert_allclose(x, y, rtol=rtol, atol=atol)


def f32(*shape):
  return RNG.normal(size=shape).astype(np.float32)


def meshes(shape, names):
  """The same mesh in autodidax and in JAX, with Auto axes (the partitioner
  decides; the cases in Explicit mode, JAX's default, come at the end)."""
  return (adx.make_mesh(shape, names, axis_types=(adx.sharding.AxisType.Auto,) * len(names)),
          jax.make_mesh(shape, names, axis_types=(AUTO,) * len(names)))


def both(make, *args, rtol=1e-5):
  """Run `make(L)`, a function built from library L (autodidax's or JAX's
  lax, numpy, shard_map, P and mesh), in both and compare."""
  ours = make(OURS)(*args)
  theirs = make(THEIRS)(*[jnp.asarray(a) for a in args])
  close(ours, theirs, rtol=rtol)
  return ours, theirs


class Lib:
  def __init__(self, **kw):
    self.__dict__.update(kw)


M1, JM1 = meshes((8,), ("i",))
M2, JM2 = meshes((4, 2), ("data", "model"))
OURS = Lib(lax=lax, np=anp, shard_map=adx.shard_map, P=P, m1=M1, m2=M2, grad=adx.grad,
           jit=adx.jit, vmap=adx.vmap, kw={"check_vma": False})
THEIRS = Lib(lax=jlax, np=jnp, shard_map=jax.shard_map, P=jax.P, m1=JM1, m2=JM2,
             grad=jax.grad, jit=jax.jit, vmap=jax.vmap, kw={"check_vma": False})


def smap(L, f, mesh, in_specs, out_specs):
  return L.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, **L.kw)


# --- Devices and layouts -----------------------------------------------------------------------

@case
def devices_and_mesh():
  assert len(adx.devices()) == 8 and [d.id for d in adx.devices()] == list(range(8))
  assert M2.shape == {"data": 4, "model": 2} and M2.size == 8


@case
def device_put_shards_like_jax():
  x = f32(8, 8)
  for spec in [P("data", "model"), P("model"), P(None, "data"), P(("data", "model")),
               P(("model", "data"), None), P()]:
    ours = adx.device_put(x, NamedSharding(M2, spec))
    theirs = jax.device_put(x, jax.sharding.NamedSharding(JM2, jax.P(*spec)))
    got = sorted((s.device.id, s.index, s.replica_id) for s in ours.addressable_shards)
    want = sorted((s.device.id, s.index, s.replica_id) for s in theirs.addressable_shards)
    assert got == want, (spec, got, want)
    for s in ours.addressable_shards:
      np.testing.assert_array_equal(np.asarray(s.data), x[s.index])
    np.testing.assert_array_equal(np.asarray(ours), x)


# --- Collectives in shard_map, on a 1-D and a 2-D mesh ---------------------------------------

@case
def collectives_1d():
  x = f32(16, 3)
  ring = [(k, (k + 1) % 8) for k in range(8)]
  programs = {
      "psum": (lambda L: lambda v: L.lax.psum(v, "i"), P(None)),
      "pmean": (lambda L: lambda v: L.lax.pmean(v, "i"), P(None)),
      "pmax": (lambda L: lambda v: L.lax.pmax(v, "i"), P(None)),
      "pmin": (lambda L: lambda v: L.lax.pmin(v, "i"), P(None)),
      "all_gather": (lambda L: lambda v: L.lax.all_gather(v, "i"), P(None)),
      "all_gather tiled axis 1": (lambda L: lambda v: L.lax.all_gather(v, "i", axis=1,
                                                                       tiled=True), P()),
      "ppermute ring": (lambda L: lambda v: L.lax.ppermute(v, "i", ring), P("i")),
      "ppermute partial": (lambda L: lambda v: L.lax.ppermute(v, "i", [(0, 3), (5, 1)]),
                           P("i")),
      "axis_index": (lambda L: lambda v: v * L.lax.axis_index("i"), P("i")),
  }
  for name, (body, out) in programs.items():
    try:
      both(lambda L: smap(L, body(L), L.m1, L.P("i"), out if L is OURS else L.P(*out)), x)
    except Exception as e:
      raise AssertionError(f"{name}: {e}") from e
  y = f32(64, 3)
  both(lambda L: smap(L, lambda v: L.lax.psum_scatter(v, "i", tiled=True), L.m1, L.P(),
                      L.P("i")), y)
  both(lambda L: smap(L, lambda v: L.lax.psum_scatter(v, "i"), L.m1, L.P(), L.P("i")),
       f32(8, 3))


@case
def collectives_2d():
  x = f32(8, 6)
  spec = lambda L: L.P("data", "model")
  for name, body, out in [
      ("psum data", lambda L: lambda v: L.lax.psum(v, "data"), (None, "model")),
      ("psum model", lambda L: lambda v: L.lax.psum(v, "model"), ("data",)),
      ("psum both", lambda L: lambda v: L.lax.psum(v, ("data", "model")), ()),
      ("pmean both", lambda L: lambda v: L.lax.pmean(v, ("model", "data")), ()),
      ("all_gather both", lambda L: lambda v: L.lax.all_gather(v, ("data", "model")), ()),
      ("all_gather both tiled", lambda L: lambda v: L.lax.all_gather(
          v, ("model", "data"), axis=1, tiled=True), ()),
      ("axis_index both", lambda L: lambda v: v + L.lax.axis_index(("data", "model")),
       ("data", "model")),
      ("ppermute model", lambda L: lambda v: L.lax.ppermute(v, "model", [(0, 1), (1, 0)]),
       ("data", "model")),
  ]:
    try:
      both(lambda L: smap(L, body(L), L.m2, spec(L), L.P(*out)), x)
    except Exception as e:
      raise AssertionError(f"{name}: {e}") from e
  both(lambda L: smap(L, lambda v: L.lax.psum_scatter(v, ("data", "model"), tiled=True),
                      L.m2, L.P(), L.P(("data", "model"))), f32(16, 2))


# --- Derivatives: the transposes of the collectives, and of shard_map ----------------------

@case
def grads_through_collectives():
  x, w = f32(16, 3), f32(16, 3)
  ring = [(k, (k + 3) % 8) for k in range(8)]
  bodies = {
      "psum": lambda L: lambda v, u: L.lax.psum(v * u, "i"),
      "pmean of squares": lambda L: lambda v, u: L.lax.pmean((v * v).sum() * u, "i"),
      "all_gather": lambda L: lambda v, u: L.lax.all_gather(v, "i", tiled=True)[:2] * u,
      "ppermute": lambda L: lambda v, u: L.lax.ppermute(v * u, "i", ring),
      "psum_scatter": lambda L: lambda v, u: L.lax.psum_scatter(
          L.np.concatenate([v * k for k in range(8)]) * L.np.sin(u).sum(), "i", tiled=True),
  }
  for name, body in bodies.items():
    def loss(L, body=body):
      f = smap(L, body(L), L.m1, (L.P("i"), L.P("i")), L.P("i"))
      return lambda v, u: (L.np.sin(f(v, u)) * L.np.arange(16.)[:, None]).sum()
    try:
      both(lambda L: L.grad(loss(L), argnums=(0, 1)), x, w, rtol=1e-4)
      both(lambda L: L.jit(L.grad(loss(L), argnums=(0, 1))), x, w, rtol=1e-4)
    except Exception as e:
      raise AssertionError(f"{name}: {e}") from e


@case
def grad_of_replicated_input_and_output():
  # w is whole on every device (P()), the output too: the transpose's boundary terms
  x, w = f32(16, 4), f32(4)
  def make(L):
    f = smap(L, lambda v, u: L.lax.psum(L.np.tanh(v @ u).sum(), "i") * u, L.m1,
             (L.P("i"), L.P()), L.P())
    return L.grad(lambda v, u: (f(v, u) ** 2).sum(), argnums=(0, 1))
  both(make, x, w)


@case
def jit_vmap_jvp_linearize_of_shard_map():
  x = f32(16, 3)
  def f(L):
    return smap(L, lambda v: L.lax.psum(L.np.sin(v), "i") * v, L.m1, L.P("i"), L.P("i"))
  both(lambda L: L.jit(f(L)), x)
  both(lambda L: L.vmap(f(L), in_axes=1, out_axes=1), x)
  both(lambda L: L.vmap(L.jit(f(L))), np.stack([x, 2 * x]))
  t = f32(16, 3)
  ours = adx.jvp(f(OURS), (x,), (t,))
  theirs = jax.jvp(f(THEIRS), (jnp.asarray(x),), (jnp.asarray(t),))
  close(ours, theirs)
  y, f_lin = adx.linearize(f(OURS), x)
  yj, f_linj = jax.linearize(f(THEIRS), jnp.asarray(x))
  close((y, f_lin(t)), (yj, f_linj(jnp.asarray(t))))


@case
def named_vmap_inside_shard_map():
  x = f32(16, 5)
  both(lambda L: smap(L, L.vmap(lambda v: L.lax.psum(v, ("b", "i")), axis_name="b"),
                      L.m1, L.P("i"), L.P()), x)


# --- Training steps: data parallel, then data + model parallel ---------------------------------

def init_mlp(din=6, dh=8, dout=3):
  return {"W1": f32(din, dh) * .5, "b1": f32(dh) * .1, "W2": f32(dh, dout) * .5,
          "b2": f32(dout) * .1}


def mlp_loss(L, params, x, y):
  h = L.np.tanh(x @ params["W1"] + params["b1"])
  out = h @ params["W2"] + params["b2"]
  return ((out - y) ** 2).mean()


def sgd(params, grads, lr=0.1):
  return {k: params[k] - lr * grads[k] for k in params}


def dp_step(L, mesh):
  """Each device: its slice of the batch; the gradients averaged over "data"."""
  def local(params, x, y):
    grads = L.grad(lambda p: mlp_loss(L, p, x, y))(params)
    return sgd(params, L.lax.pmean(grads, "data"))
  return smap(L, local, mesh, (L.P(), L.P("data"), L.P("data")), L.P())


@case
def data_parallel_step_equals_one_device_step():
  params, x, y = init_mlp(), f32(32, 6), f32(32, 3)
  one_device = sgd(params, adx.grad(lambda p: mlp_loss(OURS, p, x, y))(params))
  mesh8 = adx.make_mesh((8,), ("data",), axis_types=(adx.sharding.AxisType.Auto,))
  jmesh8 = jax.make_mesh((8,), ("data",), axis_types=(AUTO,))
  ours = adx.jit(dp_step(OURS, mesh8))(params, x, y)
  close(ours, one_device, rtol=1e-5, atol=1e-6)
  theirs = jax.jit(dp_step(THEIRS, jmesh8))(params, x, y)
  close(ours, theirs)
  step, jstep = adx.jit(dp_step(OURS, mesh8)), jax.jit(dp_step(THEIRS, jmesh8))
  for _ in range(3):   # a few more steps stay together
    ours, theirs = step(ours, x, y), jstep(theirs, x, y)
  close(ours, theirs, rtol=1e-4, atol=1e-5)


def dp_mp_step(L, mesh):
  """Batch over "data"; W1's columns and W2's rows over "model" (each device
  holds a slice of the hidden layer), so the output needs a psum over "model".
  The gradient is of the whole sharded loss: shard_map's transpose."""
  def local_loss(p, x, y):
    h = L.np.tanh(x @ p["W1"] + p["b1"])
    out = L.lax.psum(h @ p["W2"], "model") + p["b2"]
    return L.lax.pmean(((out - y) ** 2).mean(), "data")
  specs = {"W1": L.P(None, "model"), "b1": L.P("model"), "W2": L.P("model", None),
           "b2": L.P()}
  loss = L.shard_map(local_loss, mesh=mesh, in_specs=(specs, L.P("data"), L.P("data")),
                     out_specs=L.P())   # JAX with its default checks (check_vma=True)

  def step(params, x, y):
    return sgd(params, L.grad(loss)(params, x, y)), loss(params, x, y)
  return step


@case
def data_and_model_parallel_step():
  params, x, y = init_mlp(), f32(32, 6), f32(32, 3)
  one_device = sgd(params, adx.grad(lambda p: mlp_loss(OURS, p, x, y))(params))
  ours, loss = adx.jit(dp_mp_step(OURS, M2))(params, x, y)
  close(ours, one_device, rtol=1e-5, atol=1e-6)
  close(loss, mlp_loss(OURS, params, x, y))
  theirs, jloss = jax.jit(dp_mp_step(THEIRS, JM2))(params, x, y)
  close((ours, loss), (theirs, jloss))
  assert ours["W1"].sharding.spec == P(None, "model")


# --- jit with shardings: XLA's partitioner ----------------------------------------------------------

@case
def sharded_jit_lays_out_outputs_over_8_devices():
  x, w = f32(16, 6), f32(6, 4)
  ins = lambda L, NS: (NS(L.m2, L.P("data", None)), NS(L.m2, L.P(None, "model")))
  f = lambda L: lambda a, b: L.np.tanh(a @ b)
  ours = adx.jit(f(OURS), in_shardings=ins(OURS, NamedSharding))(x, w)
  theirs = jax.jit(f(THEIRS), in_shardings=ins(THEIRS, jax.sharding.NamedSharding))(x, w)
  close(ours, theirs)
  assert ours.sharding.spec.normalized(2) == P("data", "model").normalized(2), ours.sharding
  got = sorted((s.device.id, s.index) for s in ours.addressable_shards)
  want = sorted((s.device.id, s.index) for s in theirs.addressable_shards)
  assert got == want and len(got) == 8
  for s in ours.addressable_shards:
    np.testing.assert_allclose(np.asarray(s.data), np.asarray(theirs)[s.index], rtol=1e-5)
  out = NamedSharding(M2, P("model"))
  red = adx.jit(lambda a, b: anp.tanh(a @ b).sum(0), in_shardings=ins(OURS, NamedSharding),
                out_shardings=out)
  y = red(x, w)
  assert y.sharding.spec == P("model") and len(y.addressable_shards) == 8
  close(y, np.tanh(x @ w).sum(0))
  hlo = red.lower(x, w).compile().as_text()
  assert "all-reduce" in hlo and "f32[4,6]" in hlo, hlo   # each device: 4 rows of x
  text = red.lower(x, w).as_text()
  assert 'sdy.mesh @mesh = <["data"=4, "model"=2]>' in text, text


@case
def sharded_jit_training_step_equals_one_device():
  params, x, y = init_mlp(), f32(32, 6), f32(32, 3)
  def step(p, xb, yb):
    return sgd(p, adx.grad(lambda q: mlp_loss(OURS, q, xb, yb))(p))
  want = step(params, x, y)
  rep, batch = NamedSharding(M2, P()), NamedSharding(M2, P("data"))
  ours = adx.jit(step, in_shardings=(rep, batch, batch), out_shardings=rep)(params, x, y)
  close(ours, want, rtol=1e-5, atol=1e-6)
  hlo = adx.jit(step, in_shardings=(rep, batch, batch)).lower(params, x, y).compile().as_text()
  assert "all-reduce" in hlo, hlo


@case
def sharded_jit_under_transformations():
  """A transformed sharded jit keeps its mesh; XLA lays out its new values."""
  x, w = f32(16, 8), f32(8, 12)
  S = lambda *spec: NamedSharding(M2, P(*spec))
  f = adx.jit(lambda a, b: anp.tanh(a @ b).sum(), in_shardings=(S("data"), S(None, "model")))
  plain = lambda a, b: anp.tanh(a @ b).sum()
  close(adx.grad(f, argnums=(0, 1))(x, w), adx.grad(plain, argnums=(0, 1))(x, w))
  close(adx.vmap(f, in_axes=(0, None))(np.stack([x, -x]), w),
        np.array([np.tanh(x @ w).sum(), np.tanh(-x @ w).sum()]))
  close(adx.jvp(f, (x, w), (x, w)), adx.jvp(plain, (x, w), (x, w)))
  theirs = jax.grad(jax.jit(lambda a, b: jnp.tanh(a @ b).sum(), in_shardings=(
      jax.sharding.NamedSharding(JM2, jax.P("data")),
      jax.sharding.NamedSharding(JM2, jax.P(None, "model")))), argnums=1)(x, w)
  close(adx.grad(f, argnums=1)(x, w), theirs, rtol=1e-4)


@case
def sharded_arrays_flow_between_programs():
  x = adx.device_put(f32(16, 4), NamedSharding(M2, P("data")))
  f = adx.shard_map(lambda v: v * 2., mesh=M2, in_specs=P("data"), out_specs=P("data"))
  y = f(x)
  z = adx.jit(lambda v: v + 1.)(y)   # runs on y's devices, in y's layout (as JAX's)
  close(z, np.asarray(x) * 2 + 1)
  assert z.sharding.same_layout(y.sharding, 2), z.sharding
  g = adx.jit(adx.shard_map(lambda v: lax.psum(v, "data"), mesh=M2, in_specs=P("data"),
                            out_specs=P()))
  close(g(y), (np.asarray(x) * 2).reshape(4, 4, 4).sum(0))


def _spec(sharding, ndim):
  """A layout as comparable text: the mesh axes splitting each dimension."""
  return tuple(tuple(a) if isinstance(a, tuple) else () if a is None else (a,)
               for a in (*sharding.spec, *[None] * (ndim - len(sharding.spec))))


@case
def plain_jit_and_eager_ops_keep_layouts():
  """A plain jit, and an eager op, of arrays laid out by device_put run on their
  devices, and their results keep a layout: the one JAX's have (Auto and Explicit)."""
  x = f32(8, 4)
  programs = {"jit": lambda L: L.jit(lambda v: L.np.sin(v) * 2.),
              "sin": lambda L: L.np.sin, "add": lambda L: lambda v: v + 1.,
              "sum0": lambda L: lambda v: v.sum(0), "matmul": lambda L: lambda v: v @ v.T,
              "T": lambda L: lambda v: v.T, "reshape": lambda L: lambda v: L.np.reshape(v, (32,))}
  for mine, theirs in [((M2, OURS), (JM2, THEIRS)), ((E2, EO), (JE2, ET))]:
    (m, L), (jm, JL) = mine, theirs
    a = adx.device_put(x, NamedSharding(m, P(*m.axis_names)))
    b = jax.device_put(x, jax.NamedSharding(jm, jax.P(*jm.axis_names)))
    for name, make in programs.items():
      if name == "matmul" and L is EO:   # ambiguous on Explicit axes: both raise
        continue
      ours, want = make(L)(a), make(JL)(b)
      close(ours, want)
      assert isinstance(ours, adx.sharding.ShardedArray), (name, type(ours))
      got, exp = _spec(ours.sharding, ours.ndim), _spec(want.sharding, want.ndim)
      assert got == exp, f"{name} on {m}: {ours.sharding.spec}, JAX's {want.sharding.spec}"
      assert (sorted((s.device.id, str(s.index)) for s in ours.addressable_shards)
              == sorted((s.device.id, str(s.index)) for s in want.addressable_shards)), name
  four = adx.make_mesh((4,), ("y",), devices=adx.devices()[:4])
  c = adx.device_put(np.ones(8, np.float32), NamedSharding(four, P("y")))
  d = adx.device_put(np.ones(8, np.float32), NamedSharding(M1, P("i")))
  for f in (lambda: c + d, lambda: adx.jit(lambda u, v: u * v)(c, d)):
    try:
      f()
    except ValueError as e:
      assert "incompatible devices" in str(e) and "[0, 1, 2, 3]" in str(e), e
    else:
      raise AssertionError("arrays on two sets of devices met without an error")


@case
def closed_over_array_in_a_sharded_jit_is_whole_on_every_device():
  """A jit closing over an array laid out on the mesh: JAX writes it into the
  program as a constant (whole on every device), so XLA's partitioner adds the
  same collectives in both libraries' programs: none to sum it."""
  x, w = f32(8, 2), f32(8, 2)
  for mine, theirs in [((M1, OURS), (JM1, THEIRS)), ((E1, EO), (JE1, ET))]:
    (m, L), (jm, JL) = mine, theirs
    axis = m.axis_names[0]
    s, js = NamedSharding(m, P(axis)), jax.NamedSharding(jm, jax.P(axis))
    a, wa = adx.device_put(x, s), adx.device_put(w, s)
    b, wb = jax.device_put(x, js), jax.device_put(w, js)
    programs = {"sum(w) + x": lambda L, c: lambda v: L.np.sum(c) + v,
                "sum(x * w)": lambda L, c: lambda v: L.np.sum(v * c),
                "x * w": lambda L, c: lambda v: v * c}
    for name, make in programs.items():
      for sharded in (True, False):
        ours = adx.jit(make(L, wa), **({"in_shardings": s} if sharded else {}))
        want = jax.jit(make(JL, wb), **({"in_shardings": js} if sharded else {}))
        close(ours(a), want(b))
        got = spmd.collectives_in(ours.lower(a).compile().as_text())
        exp = spmd.collectives_in(want.lower(b).compile().as_text())
        assert got == exp, f"{name} on {m}, in_shardings={sharded}: {got}, JAX's {exp}"
        assert _spec(ours(a).sharding, 2 - name.startswith("sum(x")) == _spec(
            want(b).sharding, 2 - name.startswith("sum(x")), name


@case
def sharded_jit_of_a_tanh_matmul_closing_over_its_weight_compiles_as_jax():
  """jit(tanh(x @ W)) with in_shardings/out_shardings, W closed over: JAX writes W
  into the program as a constant, which the partitioner may cut, so it sums
  partial products (an all-reduce) where a replicated argument would need the
  whole of x (an all-gather). Ours gives XLA the same program."""
  x, w = f32(16, 8), f32(8, 12)
  wrong = []
  for kind in ("Auto", "Explicit"):
    m = adx.make_mesh((4, 2), ("data", "model"),
                      axis_types=(getattr(adx.sharding.AxisType, kind),) * 2)
    jm = jax.make_mesh((4, 2), ("data", "model"),
                       axis_types=(getattr(jax.sharding.AxisType, kind),) * 2)
    for sx, sw, so in [(("data", "model"), (), None), (("data", "model"), (), ()),
                       ((None, "model"), (None, "model"), None), ((None, "model"), (), ()),
                       (("data", None), (), None)]:
      got = []
      for L, mesh in ((EO, m), (ET, jm)):
        ns = L.ns
        xs, ws = put(L, mesh, x, sx), put(L, mesh, w, sw)
        f = L.jit(lambda v, ws=ws, L=L: L.np.tanh(v @ ws), in_shardings=ns(mesh, sx),
                  out_shardings=None if so is None else ns(mesh, so))
        with (adx.set_mesh if L is EO else jax.set_mesh)(mesh):
          got.append((spmd.collectives_in(f.lower(xs).compile().as_text()), f(xs)))
      (ours, y), (theirs, jy) = got
      close(y, jy)
      if ours != theirs:
        wrong.append(f"{kind}, x {sx}, W {sw}, out {so}: {ours}, JAX's {theirs}")
  assert not wrong, "\n".join(wrong)


@case
def exercise_m5_reference_matches_the_partitioner():
  """M.5's reference predicts the collectives of every case the probe can draw, as the
  library's partitioned program and JAX's have them (so the reference is never wrong)."""
  from coursekit.learner import stubs
  from coursekit.learner.probes import many_devices as probes
  source = ROOT / "exercises" / "source" / "many_devices.md"
  namespace = {}
  for cell in stubs.exercises(stubs.read_source(source))["M.5"]["solution"]:
    exec(cell.source, namespace)
  predict = namespace["predict_collectives"]
  x = np.zeros(probes.M5_SHAPE, np.float32)
  outcomes, wrong = set(), []
  for in_spec, out_spec, sum_axis in probes.M5_CASES:
    ours = spmd.collectives_in(probes.m5_program(M2, in_spec, out_spec, sum_axis)
                               .lower(x).compile().as_text())
    f = (lambda v: v * 2.) if sum_axis is None else (lambda v: jnp.sum(v, axis=sum_axis))
    JS = lambda spec: jax.sharding.NamedSharding(JM2, jax.P(*spec))
    theirs = spmd.collectives_in(jax.jit(f, in_shardings=JS(in_spec), out_shardings=JS(out_spec))
                                 .lower(jnp.asarray(x)).compile().as_text())
    said = predict(in_spec, out_spec, sum_axis=sum_axis)
    if not ours == theirs == sorted(said):
      wrong.append(f"{in_spec} -> {out_spec}, sum_axis={sum_axis}: reference {said}, "
                   f"autodidax {ours}, JAX {theirs}")
    outcomes.add(tuple(ours))
  assert not wrong, "\n".join(wrong)
  assert () in outcomes and set().union(*outcomes) == {"all-reduce", "all-gather", "all-to-all"}


# --- Explicit axes and check_vma=True: JAX 0.10's defaults --------------------------------------
# Types carry shardings (f32[16@data,4]) and, inside shard_map, varying axes
# ({V:data}). Each case runs the same program with both libraries' defaults
# and compares the type text, the values, and the errors.

E1, JE1 = adx.make_mesh((8,), ("data",)), jax.make_mesh((8,), ("data",))
E2, JE2 = adx.make_mesh((4, 2), ("a", "b")), jax.make_mesh((4, 2), ("a", "b"))
from autodidax import sharding_rules  # noqa: E402
from autodidax.sharding import reshard  # noqa: E402

EO = Lib(lax=lax, np=anp, P=P, m1=E1, m2=E2, jit=adx.jit, grad=adx.grad,
         shard_map=adx.shard_map, typeof=adx.typeof,
         reshard=lambda x, m, spec: reshard(x, NamedSharding(m, P(*spec))),
         ns=lambda m, spec: NamedSharding(m, P(*spec)))
ET = Lib(lax=jlax, np=jnp, P=jax.P, m1=JE1, m2=JE2, jit=jax.jit, grad=jax.grad,
         shard_map=jax.shard_map, typeof=jax.typeof,
         reshard=lambda x, m, spec: jax.sharding.reshard(x, jax.NamedSharding(m, jax.P(*spec))),
         ns=lambda m, spec: jax.NamedSharding(m, jax.P(*spec)))


def jtype(t) -> str:
  """A type's text, JAX's spelled as ours (float32 -> f32)."""
  text = t.str_short() if hasattr(t, "str_short") and not hasattr(t, "sharding") or (
      isinstance(t, adx.core.ShapedArray)) else str(t)
  for long, short in [("float32", "f32"), ("float64", "f64"), ("int32", "i32"),
                      ("bool", "bool")]:
    text = text.replace(long + "[", short + "[")
  return text


def put(L, m, x, spec):
  if spec is None:   # a host array: no sharding in its type
    return x
  return (adx.device_put(x, NamedSharding(m, P(*spec))) if L is EO
          else jax.device_put(x, jax.NamedSharding(m, jax.P(*spec))))


def explicit_both(make, args, *, rtol=1e-5):
  """`args`: (array, mesh index 1 or 2, spec) each. Returns both types' texts."""
  outs = []
  for L in (EO, ET):
    xs = [put(L, getattr(L, f"m{k}"), x, spec) for x, k, spec in args]
    outs.append(L.jit(make(L))(*xs))
  close(*outs, rtol=rtol)
  ours, theirs = (jax.tree_util.tree_map(lambda o, L=L: jtype(L.typeof(o)), out)
                  for L, out in zip((EO, ET), outs))
  assert ours == theirs, f"types {ours}, JAX's {theirs}"


X8 = f32(8, 4)
X16 = f32(16, 8)
TYPE_CASES = {
    "sin": (lambda L: L.np.sin, [(X8, 2, ("a", "b"))]),
    "add": (lambda L: lambda x: x + x * 2., [(X8, 2, ("a", "b"))]),
    "add, one operand whole": (lambda L: lambda x, y: x + y,
                               [(X8, 2, ("a", "b")), (X8, 2, ("a", None))]),
    "add a host constant": (lambda L: lambda x: x + np.ones(4, np.float32),
                            [(X8, 2, ("a", "b"))]),
    "matmul": (lambda L: lambda x, w: x @ w, [(X8, 2, ("a",)), (f32(4, 6), 2, (None, "b"))]),
    "batched matmul": (lambda L: lambda x, w: L.np.matmul(x, w),
                       [(f32(2, 8, 4), 2, (None, "a")), (f32(2, 4, 6), 2, (None, None, "b"))]),
    "sum 0": (lambda L: lambda x: x.sum(0), [(X8, 2, ("a", "b"))]),
    "sum 1": (lambda L: lambda x: x.sum(1), [(X8, 2, ("a", "b"))]),
    "max 1": (lambda L: lambda x: x.max(1), [(X16, 1, ("data",))]),
    "broadcast_in_dim": (lambda L: lambda x: L.np.broadcast_to(x[:, None, :], (8, 3, 4)),
                         [(X8, 2, ("a", "b"))]),
    "expand_dims": (lambda L: lambda x: x[None], [(X8, 2, ("a", "b"))]),
    "transpose": (lambda L: lambda x: x.T, [(X8, 2, ("a", "b"))]),
    "reshape merge": (lambda L: lambda x: x.reshape(32), [(X8, 2, ("a", "b"))]),
    "reshape split": (lambda L: lambda x: x.reshape(8, 2, 8), [(X16, 1, ("data",))]),
    "reshape split 3": (lambda L: lambda x: x.reshape(16, 2, 4), [(X16, 1, ("data",))]),
    "reshape flat": (lambda L: lambda x: x.reshape(128), [(X16, 1, ("data",))]),
    "concatenate 0": (lambda L: lambda x: L.np.concatenate([x, x], 0), [(X8, 2, ("a", "b"))]),
    "concatenate 1": (lambda L: lambda x: L.np.concatenate([x, x], 1), [(X8, 2, ("a", "b"))]),
    "concatenate with a host constant": (
        lambda L: lambda x: L.np.concatenate([x, np.ones((8, 4), np.float32)], 0),
        [(X8, 2, ("a", "b"))]),
    "cond, a branch returning a host constant": (
        lambda L: lambda x: L.lax.cond(True, lambda x: x, lambda x: X8, x),
        [(X8, 2, ("a", "b"))]),
    "scan": (lambda L: lambda x: L.lax.scan(lambda c, _: (L.np.sin(c), None), x, None,
                                            length=3)[0], [(X8, 2, ("a", "b"))]),
    "cond": (lambda L: lambda x: L.lax.cond(True, L.np.sin, L.np.cos, x),
             [(X16, 1, ("data",))]),
    "grad of a matmul over a split batch": (
        lambda L: lambda x, w: L.grad(lambda w: ((x @ w) ** 2).sum())(w),
        [(X16, 1, ("data",)), (f32(8, 3), 1, ())]),
    "grad with a parameter split over b": (
        lambda L: lambda x, w: L.grad(lambda w: L.np.sin(x @ w).sum())(w),
        [(X8, 2, ("a",)), (f32(4, 6), 2, (None, "b"))]),
    "reshard": (lambda L: lambda x: L.reshard(x, L.m2, (None, "a")), [(X8, 2, ("a", "b"))]),
    "reshard to whole": (lambda L: lambda x: L.reshard(x, L.m1, ()) * 2.,
                         [(X16, 1, ("data",))]),
    "dot with out_sharding": (lambda L: lambda x, w: L.np.dot(x, w, out_sharding=L.ns(
        L.m2, ("a", None))), [(X8, 2, ("a", "b")), (f32(4, 6), 2, ("b",))]),
    "einsum with out_sharding": (lambda L: lambda x, w: L.np.einsum(
        "ij,jk->ki", x, w, out_sharding=L.ns(L.m2, (None, "a"))),
        [(X8, 2, ("a", "b")), (f32(4, 6), 2, ("b",))]),
    "einsum": (lambda L: lambda x, w: L.np.einsum("ij,jk->ki", x, w),
               [(X8, 2, ("a",)), (f32(4, 6), 2, (None, "b"))]),
    "reshape with out_sharding": (lambda L: lambda x: L.np.reshape(
        x, (8, 16), out_sharding=L.ns(L.m1, ("data",))), [(X16, 1, ("data",))]),
    "fori_loop from a host array": (lambda L: lambda x: L.lax.fori_loop(
        0, 3, lambda i, c: c + x, np.zeros((16, 8), np.float32)), [(X16, 1, ("data",))]),
    "scan's slices and stacked outputs": (lambda L: lambda x: L.lax.scan(
        lambda c, xi: (c + xi, xi * 2.), x.T[0], x.T), [(X16, 1, ("data",))]),
    "while_loop from a host array": (lambda L: lambda x: L.lax.while_loop(
        lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * x),
        (np.int32(0), np.ones((16, 8), np.float32))), [(X16, 1, ("data",))]),
}


@case
def explicit_types_of_every_rule():
  for name, (make, args) in TYPE_CASES.items():
    try:
      explicit_both(make, args)
    except Exception as e:
      raise AssertionError(f"{name}: {e}") from e


@case
def explicit_mesh_defaults_and_jaxpr_text():
  assert E1.axis_types == (adx.sharding.AxisType.Explicit,) and repr(JE1.axis_types[0]) == \
      repr(E1.axis_types[0])
  x = adx.device_put(X16, NamedSharding(E1, P("data")))
  jx = jax.device_put(X16, jax.NamedSharding(JE1, jax.P("data")))
  assert jtype(adx.typeof(x)) == jtype(jax.typeof(jx)) == "f32[16@data,8]"
  f = lambda L: lambda x, y: L.np.sin(x) * y + x.sum(1)[:, None]
  ours = adx.make_jaxpr(f(EO))(x, x)
  theirs = jax.make_jaxpr(f(ET))(jx, jx)
  assert "a:f32[16@data,8]" in str(ours), str(ours)
  want = [jtype(v.aval) for e in theirs.eqns for v in e.outvars if e.primitive.name in
          ("sin", "mul", "reduce_sum", "add")]
  got = [jtype(v.aval) for e in ours.eqns for v in e.out_binders if e.primitive.name in
         ("sin", "mul", "reduce_sum", "add")]
  assert got == want, (got, want)
  text = adx.jit(f(EO)).lower(x, x).as_text()
  assert 'sdy.sharding_constraint' in text and '[{"data"}, {}]' in text
  from autodidax import viz
  picture = viz.typed_jaxpr_graph(ours)
  assert "f32[16@data,8]" in picture.source and "mesh axes that cut it (data)" in picture.name


ERROR_CASES = {
    "contracting dimensions split on both sides": (
        lambda L: lambda x, w: x @ w, [(X8, 2, ("a", "b")), (f32(4, 6), 2, ("b",))],
        "out_sharding"),
    "grad for a host parameter, contracting a split batch": (
        lambda L: lambda x, w: L.grad(lambda w: ((x @ w) ** 2).sum())(w),
        [(X16, 1, ("data",)), (f32(8, 3), 1, None)], "out_sharding"),
    "incompatible shardings": (lambda L: lambda x, y: x + y,
                               [(X8, 2, ("a", "b")), (X8, 2, ("b", "a"))], "reshard"),
    "reshape that scatters a split dimension": (
        lambda L: lambda x: x.reshape(8, 16), [(X16, 1, ("data",))], "out_sharding"),
    "concatenate of operands laid out differently": (
        lambda L: lambda x, y: L.np.concatenate([x, y], 1),
        [(X8, 2, ("a", "b")), (X8, 2, ())], "sharding.reshard"),
    "cond branches laid out differently": (
        lambda L: lambda x: L.lax.cond(True, lambda x: x, lambda x: L.reshard(x, L.m2, ()), x),
        [(X8, 2, ("a", "b"))], "reshard"),
    "a scan carry whose sharding changes": (
        lambda L: lambda x: L.lax.scan(lambda c, _: (L.reshard(c, L.m1, (None, "data")), None),
                                       x, None, length=2)[0], [(X16, 1, ("data",))], "carry"),
}


@case
def explicit_errors_like_jax():
  for name, (make, args, hint) in ERROR_CASES.items():
    for L in (EO, ET):
      xs = [put(L, getattr(L, f"m{k}"), x, spec) for x, k, spec in args]
      try:
        L.jit(make(L))(*xs)
      except Exception as e:  # noqa: BLE001
        if L is EO:
          assert isinstance(e, TypeError), f"{name}: {type(e).__name__}: {e}"
          assert hint in str(e), f"{name}: {e}"
      else:
        raise AssertionError(f"{name}: {'ours' if L is EO else 'JAX'} raised nothing")
  try:
    make = lambda L: lambda x: L.np.sin(x)
    with adx.core.sharding_rules.override(lax.sin_p, None):
      del adx.core.sharding_rules[lax.sin_p]
      adx.jit(make(EO))(put(EO, E1, X16, ("data",)))
  except adx.MissingRuleError as e:
    assert "Sharding rule for 'sin'" in str(e), e
  else:
    raise AssertionError("a missing sharding rule raised nothing")


def _outcome(f):
  """The text of f()'s type, or the name of the error it raised."""
  try:
    return str(f())
  except Exception as e:  # noqa: BLE001
    return type(e).__name__


@case
def dot_general_types_like_jax():
  """Every layout of a matrix product, a batched one and an outer product
  on the 4 x 2 mesh (each operand's dimensions cut by no axis, "a" or "b"):
  the result's type, or the error, as JAX's sharding rule gives it."""
  import itertools
  products = [((8, 8), (8, 16), (((1,), (0,)), ((), ()))),
              ((4, 8, 8), (4, 8, 8), (((2,), (1,)), ((0,), (0,)))),
              ((8,), (16,), (((), ()), ((), ())))]
  wrong, outcomes = [], set()
  for xshape, yshape, dn in products:
    specs = [[s for s in itertools.product((None, "a", "b"), repeat=len(shape))
              if len({a for a in s if a}) == len([a for a in s if a])]
             for shape in (xshape, yshape)]
    for xspec, yspec in itertools.product(*specs):
      got = []
      for L in (EO, ET):
        x, y = (put(L, L.m2, np.ones(shape, np.float32), spec)
                for shape, spec in ((xshape, xspec), (yshape, yspec)))
        got.append(_outcome(lambda: L.typeof(L.lax.dot_general(x, y, dn))))
      outcomes.add(got[1])
      if got[0] != got[1]:
        wrong.append(f"{xshape} cut by {xspec} . {yshape} cut by {yspec}: ours {got[0]}, "
                     f"JAX {got[1]}")
  assert not wrong, "\n".join(wrong[:10])
  assert "ShardingTypeError" in outcomes and len(outcomes) > 10, outcomes


@case
def shard_map_takes_only_arguments_cut_as_in_specs():
  """On a mesh of Explicit axes, an argument whose type's sharding isn't its
  in_spec is refused (a NumPy array's is whole), outside jit and inside; on
  Auto axes, it is laid out as in_specs say."""
  x = f32(16, 4)
  cases = [  # (mesh, the argument's layout: None for a NumPy array, in_spec)
      ("m1", None, ("data",)), ("m1", None, ()), ("m1", None, (None,)),
      ("m1", ("data",), ("data",)), ("m1", ("data",), ()), ("m1", ("data",), ("data", None)),
      ("m1", ("data",), (None, "data")), ("m2", None, ("a", "b")), ("m2", ("a",), ("a", "b")),
      ("m2", ("a",), ("a",)), ("m2", ("b", "a"), ("b", "a")), ("auto", None, ("data",)),
      ("auto", ("data",), ())]
  wrong = []
  for mesh, layout, spec in cases:
    got = []
    for L in (EO, ET):
      m = (getattr(L, mesh) if mesh != "auto" else
           adx.make_mesh((8,), ("data",), axis_types=(adx.sharding.AxisType.Auto,)) if L is EO
           else jax.make_mesh((8,), ("data",), axis_types=(AUTO,)))
      arg = put(L, m, x, layout)
      f = L.shard_map(lambda v: v * 2., mesh=m, in_specs=L.P(*spec), out_specs=L.P(*spec))
      got.append((_outcome(lambda: jtype(L.typeof(f(arg)))),
                  _outcome(lambda: jtype(L.typeof(L.jit(f)(arg))))))
    if got[0] != got[1]:
      wrong.append(f"{mesh}, argument cut by {layout}, in_specs {spec}: ours {got[0]}, "
                   f"JAX {got[1]}")
  assert not wrong, "\n".join(wrong)
  try:
    adx.shard_map(lambda v: v, mesh=E1, in_specs=P("data"), out_specs=P("data"))(x)
  except ValueError as e:
    assert str(e).startswith("in_specs passed to shard_map: P('data', None) does not match "
                             "the specs of the input: P(None, None) for arg: float32[16,4]"), e
    assert "reshard" in str(e) and "device_put" in str(e), e
  else:
    raise AssertionError("a NumPy argument with in_specs P('data') was taken")


@case
def shard_map_takes_the_mesh_from_context():
  """With no mesh=, shard_map runs on set_mesh's mesh, eagerly and under jit,
  and as a decorator; with no mesh in context, or a mesh= that isn't the
  context's, JAX raises ValueError and so do we. The first call settles the
  mesh, as in JAX; a jit traced under one context mesh is traced again under
  another."""
  x, params, y = f32(16, 4), init_mlp(4, 8, 3), f32(16, 3)
  got = []
  for L in (EO, ET):
    set_mesh = adx.set_mesh if L is EO else jax.set_mesh
    unit = lambda v: v / L.np.sqrt(L.lax.psum(L.np.sum(v * v), "data"))
    f = L.shard_map(unit, in_specs=L.P("data"), out_specs=L.P("data"))

    @L.shard_map(in_specs=(L.P(), L.P("data"), L.P("data")), out_specs=L.P())
    def step(p, x, y):   # the data-parallel step, as the JAX docs write it
      g = L.grad(lambda p: L.lax.pmean(mlp_loss(L, p, x, y), "data"))(p)
      return sgd(p, g)

    with set_mesh(L.m1):
      xs, ys = put(L, L.m1, x, ("data",)), put(L, L.m1, y, ("data",))
      outs = [f(xs), L.jit(f)(xs), L.jit(step)(params, xs, ys), step(params, xs, ys)]
      types = [jtype(L.typeof(o)) for o in outs[:2]]
      errors = [_outcome(lambda: L.shard_map(unit, mesh=L.m2, in_specs=L.P("a"),
                                             out_specs=L.P("a"))(x))]
    m4 = (adx.make_mesh if L is EO else jax.make_mesh)((4,), ("data",))
    with set_mesh(m4):
      errors.append(_outcome(lambda: f(put(L, m4, x, ("data",)))))   # f's mesh is m1's
    g = L.jit(lambda v: L.shard_map(unit, in_specs=L.P("data"), out_specs=L.P("data"))(v))
    total = L.jit(lambda v: L.shard_map(lambda v: L.lax.psum(v, "data"), in_specs=L.P(),
                                        out_specs=L.P())(v))
    for m in (L.m1, m4, L.m1):   # the same jit, another context mesh: traced again
      with set_mesh(m):
        outs += [g(put(L, m, x, ("data",))), total(x)]   # total: 8 x, then 4 x
        types += [jtype(L.typeof(o)) for o in outs[-2:]]
    fresh = L.shard_map(unit, in_specs=L.P("data"), out_specs=L.P("data"))
    errors.append(_outcome(lambda: fresh(xs)))   # no mesh in context
    got.append((outs, types, errors))
  (ours, types, errors), (theirs, jtypes, jerrors) = got
  close(ours, theirs, rtol=1e-5)
  assert types == jtypes, f"types {types}, JAX's {jtypes}"
  assert errors == jerrors == ["ValueError"] * 3, f"errors {errors}, JAX's {jerrors}"
  try:
    adx.shard_map(lambda v: v, in_specs=P(), out_specs=P())(x)
  except ValueError as e:
    assert "context mesh cannot be empty" in str(e) and "set_mesh(mesh)" in str(e), e


@case
def grad_of_a_custom_vjp_function_inside_shard_map():
  """bwd gets each device's own (varying) cotangent, not its psum, and must give a
  cotangent that varies as its input does: JAX raises ValueError otherwise."""
  x, w = f32(8, 2), f32(2)
  got = []
  for L in (EO, ET):
    @(adx.custom_vjp if L is EO else jax.custom_vjp)
    def f(x, w):
      return L.np.sin(x) * w

    def fwd(x, w):
      return f(x, w), (x, w)

    def bwd(psum_w):
      def rule(r, g):
        x, w = r
        gw = L.np.sum(g * L.np.sin(x), axis=0)
        return g * L.np.cos(x) * w, L.lax.psum(gw, "data") if psum_w else gw
      return rule
    f.defvjp(fwd, bwd(True))
    g = (adx.custom_vjp if L is EO else jax.custom_vjp)(f.fun)
    g.defvjp(fwd, bwd(False))
    pcast = adx.lax.pcast if L is EO else jax.lax.pcast
    cases = {
        "invariant w": lambda x, w: L.lax.psum(L.np.sum(f(x, w) ** 2), "data"),
        "w cast to varying": lambda x, w: L.lax.psum(
            L.np.sum(g(x, pcast(w, "data", to="varying")) ** 2), "data"),
        "bwd's cotangent of w varies": lambda x, w: L.lax.psum(L.np.sum(g(x, w) ** 2), "data")}
    xs = put(L, L.m1, x, ("data",))
    outs = {}
    with (adx.set_mesh if L is EO else jax.set_mesh)(L.m1):
      for name, loss in cases.items():
        sm = L.shard_map(loss, mesh=L.m1, in_specs=(L.P("data"), L.P()), out_specs=L.P())
        for how, run in [("grad", L.grad(sm, argnums=(0, 1))),
                         ("jit(grad)", L.jit(L.grad(sm, argnums=(0, 1))))]:
          try:
            outs[name, how] = [np.asarray(v) for v in run(xs, w)]
          except ValueError as e:
            outs[name, how] = "ValueError"
            if L is EO:
              assert "manual axis types do not match" in str(e), e
      unchecked = L.shard_map(lambda x, w: L.grad(lambda w: L.np.sum(g(x, w) ** 2))(w),
                              mesh=L.m1, in_specs=(L.P("data"), L.P()),
                              out_specs=L.P("data"), check_vma=False)
      outs["each device's own", "check_vma=False"] = [np.asarray(unchecked(xs, w))]
    got.append(outs)
  ours, theirs = got
  assert ours.keys() == theirs.keys()
  for k in ours:
    assert (ours[k] == "ValueError") == (theirs[k] == "ValueError"), (k, ours[k], theirs[k])
    if ours[k] != "ValueError":
      close(ours[k], theirs[k], rtol=1e-5)
  assert theirs["bwd's cotangent of w varies", "grad"] == "ValueError"
  assert theirs["invariant w", "grad"] != "ValueError"


@case
def types_print_as_jax_prints_them():
  seen = []
  for L in (EO, ET):
    x = put(L, L.m2, X8, ("a", "b"))
    types = [L.typeof(x), L.typeof(put(L, L.m2, X8, (("a", "b"),))),
             L.typeof(put(L, L.m2, X8, ("b",))), L.typeof(np.ones(3, np.float32)),
             L.typeof(np.int32(3))]
    L.shard_map(lambda a: types.extend([L.typeof(a), L.typeof(a.sum())]) or a, mesh=L.m2,
                in_specs=L.P("a", "b"), out_specs=L.P("a", "b"))(x)
    # varying axes print in the mesh's order, here not the alphabet's: as typeof, in a jaxpr
    mesh = (adx.make_mesh if L is EO else jax.make_mesh)((2, 4), ("b", "a"))
    f = L.shard_map(lambda a: types.append(L.typeof(a * 2.)) or a * 2., mesh=mesh,
                    in_specs=L.P("b", "a"), out_specs=L.P("b", "a"))
    x = put(L, mesh, X8, ("b", "a"))
    f(x)
    jaxpr = (adx if L is EO else jax).make_jaxpr(f)(x)
    types.append(re.search(r"jaxpr=\{ lambda ; \w+:(\S+)\.", str(jaxpr)).group(1))
    seen.append([(str(t), repr(t)) for t in types])
  assert seen[0] == seen[1], seen
  assert "{V:(b,a)}" in seen[0][-1][0], seen[0][-1]


def vma_body(L, seen):
  def body(a):
    seen.extend([L.typeof(a), L.typeof(a.sum()), L.typeof(L.lax.psum(a, "b")),
             L.typeof(L.lax.axis_index("a")), L.typeof(L.lax.all_gather(a, "a")),
             L.typeof(a * 2.), L.typeof(L.lax.pcast(X8[0, :2], "a", to="varying"))])
    return a
  return body


RING8 = [(k, (k + 1) % 8) for k in range(8)]
VMA_OPS = [
    lambda L, v, w: L.np.sin(v),
    lambda L, v, w: v * w,
    lambda L, v, w: L.lax.psum(v, "data") * 0.1,
    lambda L, v, w: v + L.lax.pmean(v * w, "data"),
    lambda L, v, w: L.lax.ppermute(v, "data", RING8),
    lambda L, v, w: v * L.lax.psum(L.np.tanh(w).sum(), "data"),
]


@case
def shard_map_types_values_and_grads():
  types = []
  for L in (EO, ET):
    seen = []
    L.shard_map(vma_body(L, seen), mesh=L.m2, in_specs=L.P("a", "b"),
                out_specs=L.P("a", "b"))(put(L, L.m2, X8, ("a", "b")))
    types.append([jtype(t) for t in seen])
  assert types[0] == types[1], types
  rng = np.random.default_rng(7)
  x, w = f32(16, 3), f32(3)
  for trial in range(8):
    ops = [VMA_OPS[k] for k in rng.integers(0, len(VMA_OPS), 3)]
    for check in (True, False):
      def make(L):
        def body(v, u):
          for op in ops:
            v = op(L, v, u)
          return L.lax.psum((v * v).sum(), "data")
        f = L.shard_map(body, mesh=L.m1, in_specs=(L.P("data"), L.P()), out_specs=L.P(),
                        check_vma=check)
        return lambda v, u: (f(v, u), L.grad(lambda v, u: f(v, u), argnums=(0, 1))(v, u))
      outs = [L.jit(make(L))(put(L, L.m1, x, ("data",)), w) for L in (EO, ET)]
      try:
        close(*outs, rtol=1e-4)
      except AssertionError as e:
        raise AssertionError(f"trial {trial}, check_vma={check}: {e}") from e


@case
def data_parallel_step_with_jax_defaults():
  """grad inside shard_map of the local loss, then a pmean: with check_vma
  the gradient of a replicated parameter is already summed over the devices
  (the transpose of its implicit pvary), so the pmean leaves it as it is."""
  params, x, y = init_mlp(), f32(32, 6), f32(32, 3)
  def dp(L):
    def local(params, x, y):
      grads = L.grad(lambda p: mlp_loss(L, p, x, y))(params)
      return sgd(params, L.lax.pmean(grads, "data"))
    mesh = adx.make_mesh((8,), ("data",)) if L is EO else jax.make_mesh((8,), ("data",))
    return mesh, L.shard_map(local, mesh=mesh, in_specs=(L.P(), L.P("data"), L.P("data")),
                             out_specs=L.P())
  (m, ours), (jm, theirs) = dp(EO), dp(ET)
  ours = adx.jit(ours)(params, put(EO, m, x, ("data",)), put(EO, m, y, ("data",)))
  theirs = jax.jit(theirs)(params, put(ET, jm, x, ("data",)), put(ET, jm, y, ("data",)))
  close(ours, theirs, rtol=1e-4)
  summed = sgd(params, adx.grad(lambda p: 8 * mlp_loss(OURS, p, x, y))(params))
  close(ours, summed, rtol=1e-4, atol=1e-5)   # the sum of the 8 local gradients


@case
def two_d_step_with_jax_defaults():
  params, x, y = init_mlp(), f32(32, 6), f32(32, 3)
  specs = {"W1": (None, "model"), "b1": ("model",), "W2": ("model", None), "b2": ()}
  outs = []
  for L in (EO, ET):
    mesh = (adx.make_mesh if L is EO else jax.make_mesh)((4, 2), ("data", "model"))
    step = dp_mp_step(L, mesh)
    p = {k: put(L, mesh, v, specs[k]) for k, v in params.items()}
    outs.append(L.jit(step)(p, put(L, mesh, x, ("data",)), put(L, mesh, y, ("data",))))
  close(*outs, rtol=1e-4)
  assert jtype(adx.typeof(outs[0][0]["W1"])) == jtype(jax.typeof(outs[1][0]["W1"]))


def main():
  only = sys.argv[1:]
  results = {}
  for name, fn in CASES.items():
    if only and name not in only:
      continue
    try:
      fn()
      results[name] = "ok"
    except Exception:  # noqa: BLE001 (each case reports its own failure)
      results[name] = traceback.format_exc(limit=6)[-3000:]
  print(json.dumps(results))


if __name__ == "__main__":
  main()
