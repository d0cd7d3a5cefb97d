"""Probes of Part 3's exercises: jit on real XLA.

Each probe runs the learner's answer on inputs from `p.rng` and records what
comes out; the reference solution's records at the same seed decide. The
programs run on the XLA runtime (jaxlib, through autodidax.runtime), on CPU.
"""
import numpy as np

import autodidax as adx
import autodidax.numpy as anp
from autodidax import api_util, batching, core, lax, lowering, runtime, tree_util, xla
from autodidax import partial_eval as pe
from autodidax.core import ShapedArray
from autodidax.xla import Array, xla_call_p

from ..checks import patched
from ..probe import probe


def _lowered_and_run(p, what, fun, args):
  """Lower `fun` for `args`, verify the module, run it; record what matters."""
  text = p.call(f"lowering {what}", lambda: fun.lower(*args).as_text())
  p.call(f"{what}: verifying the StableHLO module", runtime.verify, text)
  p.value(f"{what}: the result, and whether the module has a stablehlo.maximum",
          (p.call(f"running {what}", fun, *args), "stablehlo.maximum" in text))
  return text


@probe("3.1", answers=("max_lowering",),
       removes={"autodidax.lowering:_max_lowering": "max_lowering",
                "autodidax.lowering:_prepare_binary_operands": None})
def probe_3_1(p, max_lowering):
  r = p.rng
  x32, y32 = r.normal(size=(2, 3)).astype(np.float32), r.normal(size=(2, 3)).astype(np.float32)
  v64, w64 = r.normal(size=3), r.normal(size=3)
  i32 = r.integers(-9, 9, size=5).astype(np.int32)
  k, j = float(np.round(r.normal(), 3)), int(r.integers(-5, 5))
  s32 = np.float32(r.normal())
  nan = r.normal(size=3), r.normal(size=3)
  nan[0][0], nan[1][1] = np.nan, np.nan
  cases = [   # (what, function, args)
      ("f32[2,3] and f32[2,3]", lambda a, b: lax.max(a, b), (x32, y32)),
      ("a ReLU: f32[2,3] and the Python scalar 0.", lambda a: lax.max(a, 0.), (x32,)),
      ("a Python float first, then f64[3]", lambda a: lax.max(k, a), (v64,)),
      ("a Python float first, then f32[2,3]", lambda a: lax.max(k, a), (x32,)),
      ("i32[5] and a Python int", lambda a: lax.max(a, j), (i32,)),
      ("f32[2,3] and a strong f32 scalar", lambda a, s: lax.max(a, s), (x32, s32)),
      ("a strong f32 scalar, then f32[2,3]", lambda s, a: lax.max(s, a), (s32, x32)),
      ("two f64 scalars", lambda a, b: lax.max(a, b), (np.float64(v64[0]), np.float64(w64[0]))),
      ("NaNs propagate", lambda a, b: lax.max(a, b), nan),
      ("max of sines and cosines", lambda a, b: lax.max(anp.sin(a), anp.cos(b)), (v64, w64)),
  ]
  with lowering.lowering_rules.override(lax.max_p, max_lowering):
    for what, f, args in cases:
      _lowered_and_run(p, what, adx.jit(f), args)
    xs = r.normal(size=(4, 3))
    f = adx.jit(adx.vmap(lax.max, in_axes=(0, None)))
    p.value("jit of vmap of max, one operand not batched",
            p.call("jit of vmap of max", f, xs, v64))


@probe("3.2", answers=("reduce_max_lowering",),
       removes={"autodidax.lowering:_reduce_max_lowering": "reduce_max_lowering",
                "autodidax.lowering:_reduce_lowering": None, "autodidax.primitives:lowest": None})
def probe_3_2(p, reduce_max_lowering):
  r = p.rng
  n, m = (int(k) for k in r.integers(2, 6, size=2))   # the widths of the cases
  neg = -r.uniform(1., 5., size=(3, n))   # all negative: 0 is a wrong init value
  with_nan = r.normal(size=(2, n))
  with_nan[0, r.integers(n)] = np.nan
  with_inf = r.normal(size=(2, n))
  with_inf[r.integers(2)] = -np.inf
  bools = r.integers(0, 2, size=(3, n)).astype(bool)
  bools[r.integers(3)] = False   # a row of False
  cases = [   # (what, array, axes)
      ("f32[3,n], all negative, axis 1", neg.astype(np.float32), (1,)),
      ("f32[3,n], all negative, axis 0", neg.astype(np.float32), (0,)),
      ("f64[3,n], all negative, both axes", neg, (0, 1)),
      ("f64[3,n], no axes", neg, ()),
      ("f64[2,3,n], axes (0, 2)", r.normal(size=(2, 3, n)), (0, 2)),
      ("f64[2,n], a row of -inf", with_inf, (1,)),
      ("f64[2,n] with a NaN", with_nan, (1,)),
      ("i32[3,n], all negative", -r.integers(1, 100, size=(3, n)).astype(np.int32), (1,)),
      ("i64[m,n], at the minimum", np.full((m, n), np.iinfo(np.int64).min), (0,)),
      ("u8[2,n]", r.integers(0, 256, size=(2, n)).astype(np.uint8), (1,)),
      ("bool[3,n], a row of False", bools, (1,)),
      ("an empty f32[0,n]", np.zeros((0, n), np.float32), (0,)),
      ("an empty f64[m,0]", np.zeros((m, 0)), (1,)),
      ("an empty i32[0,n]", np.zeros((0, n), np.int32), (0,)),
      ("an empty u8[0,m]", np.zeros((0, m), np.uint8), (0,)),
      ("an empty bool[0,n]", np.zeros((0, n), bool), (0,)),
  ]
  with lowering.lowering_rules.override(lax.reduce_max_p, reduce_max_lowering):
    for what, x, axes in cases:
      p.given(n=n, m=m)
      fun = adx.jit(lambda x, axes=axes: lax.reduce_max(x, axes))
      text = p.call(f"lowering {what}", lambda: fun.lower(x).as_text())
      p.call(f"{what}: verifying the StableHLO module", runtime.verify, text)
      p.value(f"{what}: the result, and whether the module has a stablehlo.reduce with a "
              "stablehlo.maximum", (p.call(f"running {what}", fun, x),
                                    "stablehlo.reduce" in text and "stablehlo.maximum" in text))
    p.given()
    xs = r.normal(size=(4, 5))
    p.value("jit of vmap of max", p.call("jit of vmap of max",
                                         adx.jit(adx.vmap(lambda v: anp.max(v))), xs))
    shift = adx.jit(lambda v: anp.exp(v - anp.max(v, axis=1, keepdims=True)))
    p.value("jit of exp(x - max(x, axis=1))", p.call("jit of a softmax shift", shift, xs))


@probe("3.3", answers=("xla_call_vmap",),
       removes={"autodidax.xla:_xla_call_vmap": "xla_call_vmap",
                "autodidax.batching:batch_jaxpr_axes": None, "autodidax.batching:batch_jaxpr": None})
def probe_3_3(p, xla_call_vmap):
  r = p.rng
  W = r.normal(size=(3, 2))   # a constant the jitted functions close over
  B = int(r.choice([2, 4, 5, 6]))   # the batch size, never 3 (the other axis)
  xs, ys = r.normal(size=(B, 3)), r.normal(size=(3, B))
  x, y = r.normal(size=3), r.normal(size=3)
  f = lambda x, y: (anp.sin(x) * y + 1., anp.tanh(y) * 2.)   # the second output ignores x
  g = lambda x: anp.tanh(anp.dot(x, W))                       # W: a const of the jaxpr
  executed = []   # the input shapes of each compiled program that runs

  def counting_impl(*args, jaxpr, num_consts, **params):
    executed.append([list(a.shape) for a in jaxpr.in_avals])
    return xla._xla_call_impl(*args, jaxpr=jaxpr, num_consts=num_consts, **params)

  jit, vmap = adx.jit, adx.vmap
  cases = [   # (what, function, args)
      ("in_axes=(0, 1)", lambda: vmap(jit(f), in_axes=(0, 1)), (xs, ys)),
      ("in_axes=(0, None)", lambda: vmap(jit(f), in_axes=(0, None)), (xs, y)),
      ("in_axes=(None, 1)", lambda: vmap(jit(f), in_axes=(None, 1)), (x, ys)),
      ("in_axes=(1, 0), out_axes=1", lambda: vmap(jit(f), in_axes=(1, 0), out_axes=1), (ys, xs)),
      ("a jitted function with a const", lambda: vmap(jit(g)), (xs,)),
      ("vmap of vmap of jit",
       lambda: vmap(vmap(jit(f), in_axes=(0, None)), in_axes=(None, 1)), (xs, ys)),
      ("jit of vmap of jit", lambda: jit(vmap(jit(g))), (xs,)),
  ]
  with batching.vmap_rules.override(xla_call_p, xla_call_vmap), \
       core.impl_rules.override(xla_call_p, counting_impl):
    for what, h, args in cases:
      executed.clear()
      out = p.call(f"vmap of jit, {what}", h(), *args)
      p.value(f"vmap of jit, {what}: the result, and the number of compiled programs that ran",
              (out, len(executed)))
    executed.clear()
    p.call("vmap of jit over B elements", vmap(jit(f), in_axes=(0, None)), xs, y)
    p.given(B=B)
    p.value("vmap of jit over B elements: the input shapes of the programs that ran", executed)
    p.given()
    ts = r.normal(size=(B, 3))
    primal, tangent = p.call("jvp of vmap of jit", adx.jvp, vmap(jit(g)), (xs,), (ts,))
    p.value("jvp of vmap of jit (primal)", primal)
    p.value("jvp of vmap of jit (tangent)", tangent)


@probe("3.4", answers=("cache_key",), removes={"autodidax.xla:jit._specialize": None})
def probe_3_4(p, cache_key):
  def specialize(self, args, kwargs=None):   # jit._specialize, around the learner's cache key
    key = p.call("cache_key(args, static_argnums)", cache_key, args, self.static_argnums)
    p.call("hashing the key", hash, key)
    fun_dyn, dyn_args, _ = api_util.split_static(self.fun, args, self.static_argnums, kwargs,
                                                 self.static_argnames)
    args_flat, in_tree = tree_util.tree_flatten(dyn_args)
    traced = self._cache.get(key)
    if traced is None:
      in_avals = tuple(api_util.shaped_abstractify(x) for x in args_flat)
      flat_fun, out_tree = tree_util.flatten_fun(fun_dyn, in_tree)
      jaxpr, consts = pe.closed_to_call_jaxpr(*pe.trace_to_jaxpr_dynamic(flat_fun, in_avals))
      traced = xla._Traced(jaxpr, consts, out_tree())
      self.trace_count += 1
      self._cache[key] = traced
    return traced, args_flat

  def f(tree, scale, y):   # scale is static: Python branches on it
    leaves = tree_util.tree_leaves(tree)
    total = leaves[0]
    for leaf in leaves[1:]:
      total = total * leaf
    return total * y if scale > 2 else total * y * scale

  r = p.rng
  f32 = lambda n=3: r.normal(size=n).astype(np.float32)
  a32, b32, y32 = f32(), f32(), f32()
  calls = [   # (what, args); scale is argument 1
      ("f32[3]", (a32, 2, y32)),
      ("f32[3] again, other values", (f32(), 2, y32)),
      ("f64[3]", (r.normal(size=3), 2, y32)),
      ("f32[4]", (f32(4), 2, f32(4))),
      ("scale=3", (a32, 3, y32)),
      ("scale=2 again", (b32, 2, y32)),
      ("a strong f64 scalar", (np.float64(r.normal()), 2, y32)),
      ("a weak Python float", (float(r.normal()), 2, y32)),
      ("another Python float", (float(r.normal()), 2, y32)),
      ("a strong f32 scalar", (np.float32(r.normal()), 2, y32)),
      ("a Python int", (int(r.integers(1, 9)), 2, y32)),
      ("a tuple of two f32[3]", ((a32, b32), 2, y32)),
      ("a list of two f32[3]", ([a32, b32], 2, y32)),
      ("another tuple of two f32[3]", ((b32, a32), 2, y32)),
      ("a dict {a, b}", ({"a": a32, "b": b32}, 2, y32)),
      ("a dict {a, c}", ({"a": a32, "c": b32}, 2, y32)),
      ("a dict {b, a}", ({"b": b32, "a": a32}, 2, y32)),
      ("(f32[3], None)", ((a32, None), 2, y32)),
      ("(f32[3],)", ((a32,), 2, y32)),
      ("scale=5", (a32, 5, y32)),
      ("scale=2.5", (a32, 2.5, y32)),
  ]
  with patched(xla.jit, "_specialize", specialize):
    for static_argnums in (1, -2):
      fun = adx.jit(f, static_argnums=static_argnums)
      for what, args in calls:
        got = p.call(f"calling the jitted function with {what}", fun, *args)
        p.value(f"static_argnums={static_argnums}, {what}: the result, and the traces in all "
                "after the call", (got, fun.trace_count))
      n = fun.trace_count
      arr = p.call("a jitted result", adx.jit(lambda x: x * 1.), a32)
      got = p.call("calling with a device Array", fun, arr, 2, y32)
      p.value(f"static_argnums={static_argnums}, a device Array: the result, and whether it "
              "reuses the trace for f32[3]", (got, fun.trace_count == n))
    p.raises("hashing the key with a list as a static argument (unhashable)",
             lambda: hash(cache_key((a32, [1, 2], y32), (1,))))


@probe("3.5", answers=("device_buffer",), removes={"autodidax.xla:device_buffer": "device_buffer"})
def probe_3_5(p, device_buffer):
  to_host, to_device = runtime.to_numpy, runtime.device_put
  copies = {"to_device": 0, "to_host": 0}

  def counting_put(x, platform=None):
    copies["to_device"] += 1
    return to_device(x, platform)

  def counting_fetch(buf):
    copies["to_host"] += 1
    return to_host(buf)

  def reset():
    copies.update(to_device=0, to_host=0)

  r = p.rng
  x32 = r.normal(size=3).astype(np.float32)
  with patched(runtime, "device_put", counting_put), patched(runtime, "to_numpy", counting_fetch):
    arr = p.call("making a device Array with jit", adx.jit(lambda x: x * 2.), x32)
    reset()
    buf = p.call("device_buffer(an Array on the platform, ...)", device_buffer, arr, arr.aval, "cpu")
    p.value("an Array on the platform: whether its own buffer is handed over, the copies made, "
            "whether its data stayed on the device, and the buffer's contents",
            (buf is arr._buf, dict(copies), arr._npy is None,
             p.call("reading back an Array on the platform", to_host, buf)))
    host_cases = [   # (what, value, aval)
        ("an f32 array for f32[3]", r.normal(size=3).astype(np.float32), ShapedArray((3,), np.float32)),
        ("an f64 array for f32[3]", r.normal(size=3), ShapedArray((3,), np.float32)),
        ("a Python float for f32[]", float(r.normal()), ShapedArray((), np.float32, weak_type=True)),
        ("a list of ints for f64[3]", [int(i) for i in r.integers(-9, 9, size=3)],
         ShapedArray((3,), np.float64)),
        ("a Python int for i32[]", int(r.integers(-99, 99)), ShapedArray((), np.int32)),
        ("a list of bools for bool[2]", [bool(b) for b in r.integers(0, 2, size=2)],
         ShapedArray((2,), np.bool_)),
        ("an f32 array for f64[2,2]", r.normal(size=(2, 2)).astype(np.float32),
         ShapedArray((2, 2), np.float64)),
    ]
    for what, val, aval in host_cases:
      reset()
      buf = p.call(f"device_buffer({what})", device_buffer, val, aval, "cpu")
      p.value(f"{what}: whether it is a device buffer, the copies made, and its contents",
              (runtime.is_buffer(buf), dict(copies), p.call(f"reading back {what}", to_host, buf)))
    other = Array(arr._buf, arr.aval, "some_other_platform")
    reset()
    buf = p.call("device_buffer(an Array of another platform)", device_buffer,
                 other, other.aval, "cpu")
    p.value("an Array of another platform: whether it is a new buffer, the copies to the "
            "device, and its contents", (buf is not other._buf, copies["to_device"],
                                         p.call("reading back an Array of another platform",
                                                to_host, buf)))

    # Chained jitted calls: one copy in, none in between, none out until asked.
    h = adx.jit(lambda x: anp.tanh(x) * 3. + 1.)
    p.call("h(x), to compile h", h, x32)
    reset()
    z = p.call("h(h(h(x)))", lambda: h(h(h(x32))))
    p.value("h(h(h(x))): the copies made, and the result", (dict(copies), z), rtol=1e-6, atol=1e-6)
    # A compiled program (which never retraces) works with its own types and refuses
    # others, as JAX's does, before any copy.
    compiled = p.call("compiling x * x for f32[3]", lambda: adx.jit(lambda x: x * x).lower(x32).compile())
    p.value("a program compiled for f32[3], called with an f32[3]",
            p.call("calling a compiled program", compiled, r.normal(size=3).astype(np.float32)))
    p.raises("a program compiled for f32[3], called with an f64[3]", compiled, r.normal(size=3))
    s = float(r.normal())
    p.value("jit(x * s)(f32[3], a Python float)",
            p.call("jit(x * s)(f32[3], a Python float)", adx.jit(lambda x, s: x * s), x32, s))
