"""Probes of Part 1's exercises: transformations as interpreters.

Each probe runs the learner's answer on inputs from `p.rng` and records what
comes out; the reference solution's records at the same seed decide.
"""
import numpy as np

import autodidax as adx
import autodidax.numpy as anp
from autodidax import ad, batching, core, lax
from autodidax.ad import Zero, instantiate_zeros
from autodidax.jaxpr import eval_jaxpr

from ..checks import recorded_binds
from ..probe import probe


@probe("1.1", answers=("full_raise",), removes={"autodidax.core:full_raise": "full_raise"})
def probe_1_1(p, full_raise):
  boxed = []   # how SpyTrace boxed values: "pure" or "lift"
  raised = []  # the error full_raise raised, with its message

  class SpyTrace(ad.JVPTrace):   # a real JVP interpreter that records its boxing
    def pure(self, val):
      boxed.append("pure")
      return super().pure(val)

    def lift(self, val):
      boxed.append("lift")
      return super().lift(val)

  def innermost(v):   # the number inside a tracer (of tracers)
    while isinstance(v, ad.JVPTracer):
      v = v.primal
    return v

  with core.new_main(SpyTrace) as lower, core.new_main(SpyTrace) as upper:
    x = ad.JVPTracer(SpyTrace(lower), p.rng.normal(), 1.)
    y = ad.JVPTracer(SpyTrace(upper), p.rng.normal(), 1.)

    def outcome(main, val):
      """The boxing methods called, the interpreter of the result, how it holds `val`, and
      the number inside; or the error raised."""
      boxed.clear()
      raised.clear()
      try:
        r = full_raise(SpyTrace(main), val)
      except NotImplementedError:
        raise
      except Exception as e:  # noqa: BLE001 (the learner's code)
        raised.append(f"{type(e).__name__}: {e}")   # shown if the reference didn't raise it
        return f"raises {type(e).__name__}"
      of = getattr(getattr(r, "_trace", None), "main", None)
      return (list(boxed), "upper" if of is upper else "lower" if of is lower else "neither",
              "val itself" if r is val else "a tracer around val"
              if getattr(r, "primal", None) is val else "something else", innermost(r))

    cases = [   # (what, the interpreter that boxes, the value): in a seeded order
        ("a scalar constant, by the upper interpreter", upper, float(p.rng.normal())),
        ("an array constant, by the upper interpreter", upper, p.rng.normal(size=3)),
        ("a tracer of the upper interpreter (a new Trace object)", upper, y),
        ("a tracer of the lower interpreter, by the upper one", upper, x),
        ("a tracer of the upper interpreter, by the lower one", lower, y)]
    for k, (what, main, val) in p.shuffled(cases):
      p.given(boxing=what)
      got = p.call(f"full_raise, seeded case #{k}", outcome, main, val)
      p.value(f"full_raise, seeded case #{k}: the boxing methods called, the interpreter of "
              "the result, how it holds the value, and the number inside; or the error raised",
              got, detail=raised[0] if raised else None)
    p.given()

  # Where `bind` finds it, inside nested transformations.
  x0 = float(p.rng.uniform(-1, 1))
  f = lambda x: adx.jvp(lambda y: anp.sin(x * y) * y, (x,), (1.,))[1]
  d = p.call("jvp of a jvp that closes over x", adx.jvp, f, (x0,), (1.,))
  p.value("jvp of a jvp that closes over x (primal)", d[0])
  p.value("jvp of a jvp that closes over x (tangent)", d[1])
  xs = p.rng.uniform(-1, 1, size=5)
  g = adx.vmap(lambda x: adx.jvp(lambda y: anp.tanh(x * y), (2.,), (1.,))[1])
  p.value("vmap of a jvp that closes over the batched x", p.call("vmap of a jvp", g, xs))


@probe("1.2", answers=("tanh_jvp",), removes={"autodidax.ad:_tanh_jvp": None})
def probe_1_2(p, tanh_jvp):
  with ad.jvp_rules.override(lax.tanh_p, tanh_jvp):
    for shape in [(), (7,), (2, 3)]:
      x, t = 1.5 * p.rng.normal(size=shape), p.rng.normal(size=shape)
      p.given(x=x, t=t)
      y, y_dot = p.call(f"jvp of tanh, shape {shape}", adx.jvp, lax.tanh, (x,), (t,))
      p.value(f"jvp of tanh, shape {shape}: primal output", y)
      p.value(f"jvp of tanh, shape {shape}: tangent output", y_dot)
    for i in range(2):
      x = float(p.rng.uniform(-2, 2))
      p.given(x=x)
      d2 = p.call("a second derivative (a jvp of a jvp, where x is a tracer)",
                  lambda: adx.jvp(lambda x: adx.jvp(lax.tanh, (x,), (1.,))[1], (x,), (1.,))[1])
      p.value(f"second derivative at point {i}", d2)
    x = p.rng.normal(size=int(p.rng.integers(1, 6)))
    p.given(x=x)
    y, y_dot = p.call("tanh_jvp with a symbolic Zero tangent", tanh_jvp, (x,), (Zero.from_value(x),))
    p.value("a Zero tangent: the primal output, and the tangent out (zeros)",
            (y, instantiate_zeros(y_dot)))


def _leaf(p):
  return float(np.round(p.rng.normal(), 3))


@probe("1.3", answers=("tree_flatten", "tree_unflatten"),
       removes={"autodidax.tree_util:tree_flatten": "tree_flatten",
                "autodidax.tree_util:tree_unflatten": "tree_unflatten",
                "autodidax.tree_util:_flatten": None, "autodidax.tree_util:_unflatten": None})
def probe_1_3(p, tree_flatten, tree_unflatten):
  L = lambda: _leaf(p)
  trees = [L(), p.rng.normal(size=3), (), None, [None], (L(), [L(), L()]),
           {"b": L(), "a": (L(), None, [L()]), "c": {}},
           [p.rng.normal(size=2), {"y": [L(), (L(),)], "x": (4,)}, "a string leaf"],
           ((L(),),), {"k": [[], [L()]]}]
  offset = int(p.rng.integers(100))   # the new leaves' names
  for i, tree in p.shuffled(trees):   # in a seeded order
    originals = []
    def collect(t):   # the objects that can be leaves, to check that no leaf is a copy
      if type(t) in (tuple, list):
        [collect(c) for c in t]
      elif type(t) is dict:
        [collect(c) for c in t.values()]
      else:
        originals.append(t)
    collect(tree)
    p.given(tree=tree)
    leaves, treedef = p.call(f"tree_flatten of tree {i}", tree_flatten, tree)
    p.value(f"tree {i}: whether tree_flatten returns a list; the leaves, in order; whether "
            "they are the tree's own objects, not copies",
            (type(leaves) is list, leaves, all(any(l is o for o in originals) for l in leaves)))
    new = [f"leaf{j + offset}" for j in range(len(leaves))]
    p.value(f"tree {i}: tree_unflatten(treedef, leaves) rebuilds it, and puts new leaves in place",
            (p.call(f"tree_unflatten of tree {i}", tree_unflatten, treedef, leaves),
             p.call(f"tree_unflatten of tree {i} with new leaves", tree_unflatten, treedef, new)))
  pairs = [((L(), L()), (L(), L())), ({"a": L(), "b": [L()]}, {"b": [L()], "a": L()}),
           ([None, L()], [None, p.rng.normal(size=3)]), ((L(), L()), [L(), L()]),
           ({"a": L()}, {"b": L()}), ((None,), (L(),)), ([L(), [L()]], [[L()], L()]),
           (((L(),),), (L(),)), ({"a": L()}, (L(),))]
  for i, (a, b) in p.shuffled(pairs):   # in a seeded order
    p.given(a=a, b=b)
    la, ta = p.call(f"tree_flatten of pair {i}", tree_flatten, a)
    lb, tb = p.call(f"tree_flatten of pair {i}", tree_flatten, b)
    p.value(f"pair {i}: the leaves of a and of b, and whether their treedefs are equal (exactly "
            "when the structures are)", (la, lb, bool(ta == tb)))
  p.given()


@probe("1.4", answers=("moveaxis",),
       removes={"autodidax.batching:moveaxis": "moveaxis", "autodidax.numpy:moveaxis": None})
def probe_1_4(p, moveaxis):
  for shape in [(5,), (2, 3), (2, 3, 4), (2, 3, 4, 5)]:
    x = p.rng.normal(size=shape)
    for src in range(len(shape)):
      for dst in range(len(shape)):
        with recorded_binds() as binds:
          out = p.call(f"moveaxis(x, {src}, {dst}), x of shape {shape}", moveaxis, x, src, dst)
        p.value(f"moveaxis(x, {src}, {dst}), x of shape {shape}: the result, and whether it "
                "bound one transpose (none if nothing moves)",
                (out, binds == ["transpose"] or (src == dst and binds == [])))
  x, t = p.rng.normal(size=(2, 3, 4)), p.rng.normal(size=(2, 3, 4))
  _, t_out = p.call("moveaxis under jvp", adx.jvp, lambda x: moveaxis(x, 0, 2), (x,), (t,))
  p.value("moveaxis under jvp (tangent)", t_out)
  x, y = p.rng.normal(size=(2, 3, 4)), p.rng.normal(size=(2, 3))
  f = adx.vmap(lambda a, b: anp.transpose(a) * b, in_axes=(1, 1), out_axes=2)
  p.value("vmap with in_axes=(1, 1), out_axes=2 (move_batch_axis uses moveaxis)",
          p.call("vmap with in_axes=(1, 1), out_axes=2", f, x, y))


@probe("1.5", answers=("reduce_sum_batch",), removes={"autodidax.batching:_reduce_rule": None})
def probe_1_5(p, reduce_sum_batch):
  x = p.rng.normal(size=(2, 3, 4))
  with batching.vmap_rules.override(lax.reduce_sum_p, reduce_sum_batch):
    for bdim in range(3):
      for axes in [(), (0,), (1,), (0, 1)]:
        what = f"reduce_sum_batch of x of shape (2, 3, 4), its batch axis {bdim}, axes={axes}"
        out, out_dim = p.call(what, reduce_sum_batch, x.shape[bdim], [x], [bdim], axes=axes)
        ok = isinstance(out_dim, (int, np.integer)) and 0 <= out_dim < np.ndim(out)
        p.value(f"{what}: whether out_dim is an axis of the output, and the output with the "
                "batch axis moved first",
                (True, np.moveaxis(np.asarray(out), out_dim, 0)) if ok else (False,))
    for in_axes in (0, 1, 2):
      for axis in (0, 1, None):
        f = adx.vmap(lambda v: anp.sum(v, axis=axis), in_axes=in_axes)
        p.value(f"vmap(sum(axis={axis}), in_axes={in_axes})",
                p.call(f"vmap(sum(axis={axis}), in_axes={in_axes})", f, x))
    nested = adx.vmap(adx.vmap(lambda v: anp.sum(v * v), in_axes=1), in_axes=2)
    p.value("nested vmap", p.call("nested vmap", nested, x))
    t = p.rng.normal(size=(2, 3, 4))
    g = adx.vmap(lambda v: anp.sum(anp.sin(v), axis=0), in_axes=1)
    y, y_dot = p.call("jvp of vmap", adx.jvp, g, (x,), (t,))
    p.value("jvp of vmap (primal)", y)
    p.value("jvp of vmap (tangent)", y_dot)


# f's own operations, and their JVPs': a trace of jacfwd(f) that pushes the basis
# through one vmap holds each once; a loop of jvp calls, or of a linearized f, holds
# them once per basis vector. Loops and callbacks would hide a loop from the count.
_ARITHMETIC = {"sin", "cos", "exp", "tanh", "add", "sub", "mul", "neg", "reduce_sum"}
_HIDING = {"while", "scan", "cond", "pure_callback", "debug_callback", "io_callback"}


def _operations(jaxpr, counts=None):
  """{primitive name: equations} of `jaxpr` and every jaxpr inside it."""
  counts = {} if counts is None else counts
  for eqn in jaxpr.eqns:
    counts[eqn.primitive.name] = counts.get(eqn.primitive.name, 0) + 1
    for v in eqn.params.values():
      for sub in v if isinstance(v, (tuple, list)) else [v]:
        sub = getattr(sub, "jaxpr", sub)
        if hasattr(sub, "eqns"):
          _operations(sub, counts)
  return counts


@probe("1.6", answers=("jacfwd",),
       removes={"autodidax.api:jacfwd": "jacfwd", "autodidax.api:jacrev": None})
def probe_1_6(p, jacfwd):
  w, c = p.rng.normal(size=(2, 3)), p.rng.normal(size=3)
  cases = [
      ("R^3 -> R^2", lambda x: anp.sum(anp.sin(x) * w, axis=1), p.rng.normal(size=3)),
      ("R^3 -> R^3, not symmetric", lambda x: x * anp.sum(x * c), p.rng.normal(size=3)),
      ("matrix -> scalar", lambda x: anp.sum(anp.exp(x) * x), p.rng.normal(size=(2, 3))),
      ("scalar -> R^4", lambda x: anp.sin(x * np.arange(1., 5.)), float(p.rng.normal())),
      ("matrix -> matrix", lambda x: anp.tanh(x) * anp.sum(x, axis=0), p.rng.normal(size=(2, 3))),
  ]
  for what, f, x in cases:
    # The Jacobian is read from the trace it is counted in: no wrapper to count calls
    # (its function could be taken out of it), and no eager run to behave otherwise.
    jac = p.call(f"jacfwd(f) for {what}", jacfwd, f)
    closed = p.call(f"make_jaxpr(jacfwd(f))(x) for {what}", adx.make_jaxpr(jac), x)
    got = p.call(f"jacfwd(f)(x) for {what}", eval_jaxpr, closed.jaxpr, closed.consts, x)
    ops = _operations(closed.jaxpr)
    p.value(f"Jacobian of {what}, how many of f's operations (and their JVPs') its trace "
            "holds (each once: vmap pushes every basis vector through one call of f), and "
            "the loops or callbacks in it (none)",
            (got, sum(n for k, n in ops.items() if k in _ARITHMETIC),
             sorted(k for k in ops if k in _HIDING)))
