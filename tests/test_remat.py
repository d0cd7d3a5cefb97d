"""checkpoint / remat against jax.checkpoint: gradients for every policy under
every transformation and inside scan, random programs (hypothesis), the
residuals print_saved_residuals lists, the optimization barrier in the
lowering, the memory XLA assigns, and the rules of `remat` and `name`."""
import contextlib
import inspect
import io
import itertools
import math
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st
from jax.ad_checkpoint import checkpoint_name as jax_name
from jax.ad_checkpoint import print_saved_residuals as jax_print_saved_residuals

import autodidax as adx
import autodidax.numpy as anp
from autodidax import ad, ad_checkpoint, batching, core, lax, lowering, runtime
from autodidax import partial_eval as pe
from autodidax.ad_checkpoint import checkpoint_name, name_p, print_saved_residuals, remat_p

P, JP = adx.checkpoint_policies, jax.checkpoint_policies

# Each policy twice: ours and JAX's.
POLICIES = {
    "default": (None, None),
    "everything_saveable": (P.everything_saveable, JP.everything_saveable),
    "nothing_saveable": (P.nothing_saveable, JP.nothing_saveable),
    "dots_saveable": (P.dots_saveable, JP.dots_saveable),
    "dots_with_no_batch_dims_saveable": (P.dots_with_no_batch_dims_saveable,
                                         JP.dots_with_no_batch_dims_saveable),
    "save_only_these_names": (P.save_only_these_names("h"), JP.save_only_these_names("h")),
    "save_any_names_but_these": (P.save_any_names_but_these("h"),
                                 JP.save_any_names_but_these("h")),
    "save_from_both_policies": (
        P.save_from_both_policies(P.dots_with_no_batch_dims_saveable,
                                  P.save_only_these_names("g")),
        JP.save_from_both_policies(JP.dots_with_no_batch_dims_saveable,
                                   JP.save_only_these_names("g"))),
}
OURS = dict(np=anp, name=checkpoint_name, checkpoint=adx.checkpoint, scan=lax.scan)
THEIRS = dict(np=jnp, name=jax_name, checkpoint=jax.checkpoint, scan=jax.lax.scan)


def layer(x, w, v, np_, name):
  """Every kind of equation a policy tells apart: a matmul without batch
  dimensions, one with, named values, elementwise work."""
  h = name(np_.sin(x @ w), "h")
  g = name(np_.cos(h) * x, "g")
  b = np_.reshape(np_.reshape(g, (-1, 1, 4)) @ v, (-1, 4))   # a batched matmul
  return np_.sum(np_.exp(np_.sin(b)) * h)


def make_pair(policy_name, **kw):
  ours, theirs = POLICIES[policy_name]
  f = adx.checkpoint(lambda x, w, v: layer(x, w, v, anp, checkpoint_name), policy=ours, **kw)
  g = jax.checkpoint(lambda x, w, v: layer(x, w, v, jnp, jax_name), policy=theirs, **kw)
  return f, g


def inputs(seed=0):
  rng = np.random.default_rng(seed)
  return (rng.normal(size=(3, 4)), rng.normal(size=(4, 4)) / 2, rng.normal(size=(3, 4, 4)) / 2)


def close(ours, theirs, tol=1e-10):
  a, b = jax.tree.leaves(ours), jax.tree.leaves(theirs)
  assert len(a) == len(b)
  for u, v in zip(a, b):
    np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=tol, atol=tol)


def _scan_of(f, scan, np_):
  def body(c, x):
    return c * 0.9 + f(x, *c_args), f(x * c, *c_args)
  c_args = []
  def run(xs, w, v):
    c_args[:] = [w, v]
    carry, ys = scan(body, 0.1, xs)
    return carry + np_.sum(ys * ys)
  return run


# transformation: (ours, theirs), each a function of (f, scan, np, jax-or-adx module)
TRANSFORMS = {
    "grad": lambda f, m, M: M.grad(f, (0, 1, 2)),
    "jit(grad)": lambda f, m, M: M.jit(M.grad(f, (0, 1, 2))),
    "grad(jit)": lambda f, m, M: M.grad(M.jit(f), (0, 1, 2)),
    "vjp": lambda f, m, M: lambda *a: M.vjp(f, *a)[1](1.5),
    "linearize": lambda f, m, M: lambda *a: M.linearize(f, *a)[1](*(x * 0.5 for x in a)),
    "jvp": lambda f, m, M: lambda *a: M.jvp(f, a, tuple(x[::-1] for x in a)),
    "vmap(grad)": lambda f, m, M: lambda x, w, v: M.vmap(M.grad(f), (0, None, None))(
        m["np"].stack([x, 2 * x]), w, v),
    "grad(vmap)": lambda f, m, M: lambda x, w, v: M.grad(
        lambda x: m["np"].sum(M.vmap(f, (0, None, None))(x, w, v)))(m["np"].stack([x, -x])),
    "hessian": lambda f, m, M: lambda x, w, v: M.hessian(f)(x, w, v),
    "grad(grad)": lambda f, m, M: lambda x, w, v: M.grad(
        lambda w: M.grad(f, 1)(x, w, v)[1, 2])(w),
    "jacfwd(grad)": lambda f, m, M: lambda x, w, v: M.jacfwd(M.grad(f, 2), 2)(x, w, v),
    "grad(scan(checkpoint))": lambda f, m, M: lambda x, w, v: M.grad(
        _scan_of(f, m["scan"], m["np"]), (0, 1, 2))(m["np"].stack([x, x * 0.5, -x]), w, v),
    "jit(grad(scan(checkpoint)))": lambda f, m, M: lambda x, w, v: M.jit(M.grad(
        _scan_of(f, m["scan"], m["np"]), (0, 1, 2)))(m["np"].stack([x, x * 0.5, -x]), w, v),
}


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("policy", POLICIES)
def test_checkpoint_agrees_with_jax(policy, transform):
  f, g = make_pair(policy)
  ours = TRANSFORMS[transform](f, OURS, adx)(*inputs())
  theirs = TRANSFORMS[transform](g, THEIRS, jax)(*inputs())
  close(ours, theirs)


@pytest.mark.parametrize("policy", POLICIES)
def test_value_and_gradient_match_no_checkpoint(policy):
  """checkpoint changes what is saved, never a value."""
  f, _ = make_pair(policy)
  plain = lambda x, w, v: layer(x, w, v, anp, checkpoint_name)
  close(adx.value_and_grad(f, (0, 1, 2))(*inputs(1)),
        adx.value_and_grad(plain, (0, 1, 2))(*inputs(1)), tol=1e-12)


def test_prevent_cse_false_and_nested_checkpoints_agree_with_jax():
  f, g = make_pair("dots_saveable", prevent_cse=False)
  close(adx.jit(adx.grad(f, (0, 1, 2)))(*inputs()), jax.jit(jax.grad(g, (0, 1, 2)))(*inputs()))
  inner = lambda np_, ck: ck(lambda x: np_.sin(np_.sin(x)) * x)
  outer_ours = adx.checkpoint(lambda x: anp.sum(inner(anp, adx.checkpoint)(x) ** 2),
                              policy=P.dots_saveable)
  outer_jax = jax.checkpoint(lambda x: jnp.sum(inner(jnp, jax.checkpoint)(x) ** 2),
                             policy=JP.dots_saveable)
  x = np.linspace(-1, 1, 5)
  close(adx.grad(outer_ours)(x), jax.grad(outer_jax)(x))
  close(adx.hessian(outer_ours)(x), jax.hessian(outer_jax)(x))


def test_jit_inside_checkpoint_and_pytrees_kwargs_static_argnums():
  def f(params, x, *, scale, np_=anp):
    return np_.sum(np_.tanh(x @ params["w"]) * params["b"]) * scale

  def g(params, x, n, np_=anp):
    for _ in range(n):           # n must be static: Python looks at it
      x = np_.sin(x @ params["w"])
    return np_.sum(x)

  params = {"w": np.eye(3) * 0.7, "b": np.arange(3.)}
  x = np.linspace(0, 1, 6).reshape(2, 3)
  ours = adx.grad(adx.checkpoint(adx.jit(lambda p, x: f(p, x, scale=2.))))(params, x)
  theirs = jax.grad(jax.checkpoint(jax.jit(lambda p, x: f(p, x, scale=2., np_=jnp))))(params, x)
  close(ours, theirs)
  close(adx.grad(adx.checkpoint(f))(params, x, scale=3.),
        jax.grad(jax.checkpoint(lambda p, x, scale: f(p, x, scale=scale, np_=jnp)))(params, x, 3.))
  close(adx.grad(adx.checkpoint(g, static_argnums=2))(params, x, 3),
        jax.grad(jax.checkpoint(lambda p, x, n: g(p, x, n, jnp), static_argnums=2))(params, x, 3))


def test_a_python_branch_on_a_traced_value_says_to_use_static_argnums():
  def f(x, flag):
    return anp.sin(x) if flag else x
  with pytest.raises(core.ConcretizationError) as e:
    adx.grad(adx.checkpoint(f))(1., True)
  assert "static_argnums" in "".join(getattr(e.value, "__notes__", []))
  assert adx.grad(adx.checkpoint(f, static_argnums=(1,)))(1., True) == np.cos(1.)


def test_closing_over_outer_tracers_and_integer_inputs():
  def f(x, k):
    inner = adx.checkpoint(lambda y, k: anp.sin(y * x) * anp.astype(k, np.float64))
    return inner(x * 2., k)

  def g(x, k):
    inner = jax.checkpoint(lambda y, k: jnp.sin(y * x) * k.astype(jnp.float64))
    return inner(x * 2., k)
  close(adx.grad(f)(0.3, np.int32(3)), jax.grad(g)(0.3, np.int32(3)))
  close(adx.jacfwd(adx.grad(f))(0.3, np.int32(3)), jax.jacfwd(jax.grad(g))(0.3, np.int32(3)))


# --- Random programs ------------------------------------------------------------------------

OPS = {   # name: (arity, ours, theirs); every op is smooth everywhere
    "sin": (1, anp.sin, jnp.sin), "cos": (1, anp.cos, jnp.cos),
    "tanh": (1, anp.tanh, jnp.tanh), "exp_tanh": (1, lambda a: anp.exp(anp.tanh(a)),
                                                  lambda a: jnp.exp(jnp.tanh(a))),
    "mul": (2, lambda a, b: a * b, lambda a, b: a * b),
    "add": (2, lambda a, b: a + b, lambda a, b: a + b),
    "matmul": (1, None, None),     # by the weight matrix W
    "name_h": (1, None, None),     # checkpoint_name(_, "h")
}


@st.composite
def programs(draw):
  n = draw(st.integers(2, 7))
  ops = []
  for i in range(n):
    op = draw(st.sampled_from(sorted(OPS)))
    args = [draw(st.integers(0, i)) for _ in range(OPS[op][0])]   # 0 is the input
    ops.append((op, args))
  lo = draw(st.integers(0, n - 1))
  hi = draw(st.integers(lo + 1, n))   # ops[lo:hi] are checkpointed
  return ops, lo, hi


def run_program(prog, x, W, side, policy):
  ops, lo, hi = prog
  np_, name, ck = side["np"], side["name"], side["checkpoint"]

  def apply(i, op, args, vals):
    arity, ours, theirs = OPS[op]
    operands = [vals[a] for a in args]
    if op == "matmul":
      return operands[0] @ W
    if op == "name_h":
      return name(operands[0], "h")
    return (ours if np_ is anp else theirs)(*operands)

  def segment(vals, start, stop):
    vals = list(vals)
    for i in range(start, stop):
      op, args = ops[i]
      vals.append(apply(i, op, args, vals))
    return vals

  vals = segment([x], 0, lo)
  vals = ck(lambda vals: segment(vals, lo, hi), policy=policy)(vals)
  vals = segment(vals, hi, len(ops))
  return np_.sum(vals[-1] * vals[-1]) + np_.sum(vals[len(vals) // 2])


@settings(max_examples=30)
@given(programs(), st.sampled_from(sorted(POLICIES)))
def test_random_programs_every_policy(prog, policy):
  note(f"program {prog}, policy {policy}")
  rng = np.random.default_rng(len(prog[0]))
  x, W = rng.normal(size=(2, 3)), rng.normal(size=(3, 3)) / 2
  ours_p, theirs_p = POLICIES[policy]
  ours = lambda x, W: run_program(prog, x, W, OURS, ours_p)
  theirs = lambda x, W: run_program(prog, x, W, THEIRS, theirs_p)
  close(adx.value_and_grad(ours, (0, 1))(x, W), jax.value_and_grad(theirs, (0, 1))(x, W))
  close(adx.jit(adx.grad(ours, (0, 1)))(x, W), jax.grad(theirs, (0, 1))(x, W))
  t = (x[::-1], W.T)
  close(adx.jvp(ours, (x, W), t), jax.jvp(theirs, (x, W), t))
  xs = np.stack([x, -x])
  close(adx.vmap(adx.grad(ours), (0, None))(xs, W), jax.vmap(jax.grad(theirs), (0, None))(xs, W))


# --- print_saved_residuals: the chapter's examples -------------------------------------------
# These functions are the chapter's (book/remat.md). Ours and JAX's run the
# same lines, so the two lists must match to the column.

def two_layers(x, w1, w2, np_=anp, name=checkpoint_name):
  h = name(np_.sin(x @ w1), "hidden")
  return np_.sum(np_.cos(h @ w2))


def wiggle(x, np_=anp):
  return np_.sin(np_.cos(np_.sin(x)) * x)


def block(x, w, np_=anp, name=checkpoint_name):
  z = name(x @ w, "z")
  return x + np_.sin(z) * np_.cos(z)


def test_these_are_the_chapters_examples():
  chapter = (Path(__file__).resolve().parents[1] / "book" / "remat.md").read_text()
  for f in (two_layers, wiggle, block):
    assert inspect.getsource(f) in chapter, f.__name__


def saved_lines(printer, f, *args) -> list[str]:
  buf = io.StringIO()
  with contextlib.redirect_stdout(buf):
    printer(f, *args)
  return buf.getvalue().splitlines()


def chapter_examples():
  x, w1, w2 = np.ones((2, 3), np.float32), np.ones((3, 4), np.float32), np.ones((4, 2), np.float32)
  jnp_two = lambda x, w1, w2: two_layers(x, w1, w2, jnp, jax_name)
  yield "two_layers", two_layers, jnp_two, (x, w1, w2)
  for name, (p, jp) in POLICIES.items():
    yield (f"checkpoint(two_layers, {name})", adx.checkpoint(two_layers, policy=p),
           jax.checkpoint(jnp_two, policy=jp), (x, w1, w2))
  yield ("save_only_these_names('hidden')",
         adx.checkpoint(two_layers, policy=P.save_only_these_names("hidden")),
         jax.checkpoint(jnp_two, policy=JP.save_only_these_names("hidden")), (x, w1, w2))
  yield "wiggle", wiggle, lambda x: wiggle(x, jnp), (np.float32(0.5),)
  yield ("checkpoint(wiggle)", adx.checkpoint(wiggle),
         jax.checkpoint(lambda x: wiggle(x, jnp)), (np.float32(0.5),))
  xb, wb = np.ones((4, 3)), np.eye(3)
  jnp_block = lambda x, w: block(x, w, jnp, jax_name)
  for name in ("default", "dots_saveable", "everything_saveable"):
    p, jp = POLICIES[name]
    yield (f"checkpoint(block, {name})", adx.checkpoint(block, policy=p),
           jax.checkpoint(jnp_block, policy=jp), (xb, wb))
  yield ("checkpoint(block, save_any_names_but_these('z'))",
         adx.checkpoint(block, policy=P.save_any_names_but_these("z")),
         jax.checkpoint(jnp_block, policy=JP.save_any_names_but_these("z")), (xb, wb))


@pytest.mark.parametrize("case", list(chapter_examples()), ids=lambda c: c[0])
def test_print_saved_residuals_lists_what_jax_lists(case):
  _, ours, theirs, args = case
  got = saved_lines(print_saved_residuals, ours, *args)
  want = saved_lines(jax_print_saved_residuals, theirs, *args)
  assert got == want
  assert all("unknown" not in line for line in got)


def transformed_examples():
  """Functions under vmap and jit, a jit inside, a cond: as JAX lists them."""
  x = np.arange(1., 4.)

  def make(A, np_, L):
    scaled = lambda x, y: np_.sin(x) * y   # noqa: E731
    def inner(x):
      return np_.sin(x) * x
    S = A.checkpoint_policies.everything_saveable
    sq = lambda v: v * v   # noqa: E731 (its residual is its input)
    sq_jit = A.custom_jvp(lambda v: A.jit(sq)(v))
    sq_jit.defjvp(lambda p, t: (sq_jit(p[0]), A.jit(lambda a, b: a * b * 2.)(p[0], t[0])))
    sq_rule = A.custom_jvp(sq)
    sq_rule.defjvp(lambda p, t: (sq_rule(p[0]), 2. * p[0] * t[0]))
    return {
        "vmap": (A.vmap(scaled), (x, x)),
        "jit": (A.jit(scaled), (x, x)),
        "jit of a lambda": (A.jit(lambda v: np_.sum(np_.sin(v))), (x,)),
        "a jit inside": (lambda x: np_.sum(A.jit(inner)(x)), (x,)),
        "cond": (lambda x: L.cond(np_.sum(x) > 0, lambda v: np_.sum(np_.sin(v)),
                                  lambda v: np_.sum(np_.cos(v)), x), (x,)),
        # tanh's derivative saves its output y and 1 - y, as JAX's rule does
        "tanh": (lambda x: np_.sum(np_.tanh(x)), (x,)),
        "tanh of tanh": (lambda x: np_.sum(np_.tanh(np_.tanh(x))), (x,)),
        "tanh of a product": (lambda x, y: np_.sum(np_.tanh(x * y) * y), (x, x)),
        # inside a checkpoint that saves what it can, a residual that is the input of a
        # jit, a cond or a custom_jvp rule is "from the argument x", as in JAX
        "a jit inside a checkpoint": (A.checkpoint(lambda x: np_.sin(A.jit(sq)(x)),
                                                   policy=S), (x,)),
        "a checkpointed jit": (A.checkpoint(A.jit(sq), policy=S), (x,)),
        "a cond inside a checkpoint": (A.checkpoint(lambda x: np_.sin(L.cond(
            x[0] > 0, sq, lambda v: v + v, x)), policy=S), (x,)),
        "a cond of a Python bool inside a checkpoint": (A.checkpoint(lambda x: np_.sin(
            L.cond(True, sq, lambda v: v * v * 3., x)), policy=S), (x,)),
        "a checkpointed custom_jvp function with a jit": (A.checkpoint(sq_jit, policy=S),
                                                          (x,)),
        "a custom_jvp rule's operations, inside a checkpoint": (
            A.checkpoint(lambda x: np_.sin(sq_rule(x)), policy=S), (x,)),
        "a checkpointed custom_jvp function": (A.checkpoint(sq_rule, policy=S), (x,)),
    }
  ours, theirs = make(adx, anp, lax), make(jax, jnp, jax.lax)
  for name in ours:
    yield name, ours[name][0], theirs[name][0], ours[name][1]


@pytest.mark.parametrize("case", list(transformed_examples()), ids=lambda c: c[0])
def test_print_saved_residuals_of_transformed_functions(case):
  _, ours, theirs, args = case
  assert (saved_lines(print_saved_residuals, ours, *args)
          == saved_lines(jax_print_saved_residuals, theirs, *args))


def test_saved_residuals_inside_jit_and_a_scan_name_their_source():
  x = np.ones(3)
  lines = saved_lines(print_saved_residuals, adx.jit(lambda x: anp.sum(anp.sin(x) * x)), x)
  assert lines and all("jitted function '<lambda>'" in l or "argument" in l for l in lines)
  assert saved_lines(print_saved_residuals, lambda x: anp.sum(x * 2.), x) == []


# --- Exercise R.3: its reference answer is the library's answer ----------------------------------

def _exercise_entry(src: str) -> str:
  """A `saved_residuals` source as Exercise R.3 writes it: "argument x", "named h", "exp"."""
  for pattern, entry in [(r"from the argument (\S+)$", "argument {}"),
                         (r"named '(\w+)' from ", "named {}"), (r"output of (\w+) from ", "{}")]:
    if m := re.match(pattern, src):
      return entry.format(m[1])
  raise AssertionError(f"an unexpected source: {src}")


@pytest.fixture(scope="module")
def exercise_r3() -> dict:
  """The namespace of R.3's given cell and reference solution (exercises/source/remat.md)."""
  return _exercise_namespace("given-residual-chains", "exR-3-solution")


def _exercise_namespace(*cell_ids) -> dict:
  from coursekit.learner import stubs
  nb = stubs.read_source(Path(__file__).resolve().parents[1] / "exercises" / "source" / "remat.md")
  ns = dict(np=np, adx=adx, anp=anp, P=P, checkpoint_name=checkpoint_name)
  cells = {c.id: c.source for c in nb.cells}
  for cell_id in cell_ids:
    exec(compile(cells[cell_id], f"<cell {cell_id}>", "exec"), ns)
  return ns


def test_exercise_r3_reference_predicts_every_chain_the_probe_draws(exercise_r3):
  """Every chain of up to MAX_OPS ops under every policy, not only the probe's draws: the
  reference answer must be exactly what print_saved_residuals prints, in order."""
  from coursekit.learner.probes import remat as probes
  predict, x = exercise_r3["predict_residuals"], np.array([0.3, 0.7, 1.1])
  for seed in range(3):   # the probe draws from that set
    for ops, policy in probes._residual_cases(np.random.default_rng(seed)):
      assert set(ops) <= set(probes.OPS) and len(ops) <= probes.MAX_OPS
      assert policy in probes.POLICIES
  for n in range(probes.MAX_OPS + 1):
    for ops in itertools.product(probes.OPS, repeat=n):
      for policy in probes.POLICIES:
        f = probes.chain(ops, policy)
        want = [_exercise_entry(src) for _, src in ad_checkpoint.saved_residuals(f, x)]
        assert predict(ops, policy) == want, (ops, policy)


def test_exercise_r3_notebook_builds_the_probes_functions(exercise_r3):
  from coursekit.learner.probes import remat as probes
  assert set(exercise_r3["OPS"]) == set(probes.OPS)
  assert {None, *exercise_r3["POLICIES"]} == set(probes.POLICIES)
  x = exercise_r3["x"]
  saved = lambda f: [_exercise_entry(src) for _, src in ad_checkpoint.saved_residuals(f, x)]
  for ops in [("exp", "name", "log"), ("tanh", "square", "cos"), ("name", "sin", "exp")]:
    for policy in probes.POLICIES:
      ours, probes_own = exercise_r3["chain"](ops, policy), probes.chain(ops, policy)
      assert saved(ours) == saved(probes_own)
      np.testing.assert_allclose(adx.grad(ours)(x), adx.grad(probes_own)(x))


# --- The optimization barrier -----------------------------------------------------------------

def _loss(x, w, np_=anp):
  return np_.sum(np_.tanh(x @ w) ** 2)


@pytest.mark.parametrize("prevent_cse", [True, False])
def test_the_backward_pass_is_behind_an_optimization_barrier(prevent_cse):
  x, w = np.ones((2, 3)), np.ones((3, 3))
  ours = adx.jit(adx.grad(adx.checkpoint(_loss, prevent_cse=prevent_cse), 1)).lower(x, w)
  theirs = jax.jit(jax.grad(jax.checkpoint(lambda x, w: _loss(x, w, jnp),
                                           prevent_cse=prevent_cse), 1)).lower(x, w)
  text = ours.as_text()
  runtime.verify(text)
  n = text.count("stablehlo.optimization_barrier")
  assert n == theirs.as_text().count("stablehlo.optimization_barrier") == int(prevent_cse)
  if prevent_cse:   # the barrier guards the operands of the recomputation
    barrier = re.search(r"(%\d+):(\d+) = stablehlo.optimization_barrier ([^:]+)", text)
    assert barrier and int(barrier.group(2)) == len(barrier.group(3).split(","))
    assert f"{barrier.group(1)}#0" in text.split("optimization_barrier", 1)[1]
  close(ours.compile()(x, w), theirs.compile()(x, w))


def test_no_barrier_without_differentiation_and_one_per_scan_body():
  x, w = np.ones((2, 3)), np.ones((3, 3))
  assert "optimization_barrier" not in adx.jit(adx.checkpoint(_loss)).lower(x, w).as_text()

  def scanned(xs, w):
    return anp.sum(lax.scan(lambda c, x: (c + adx.checkpoint(_loss)(x, w), 0.), 0., xs)[0])
  text = adx.jit(adx.grad(scanned, 1)).lower(np.stack([x, x]), w).as_text()
  runtime.verify(text)
  assert text.count("stablehlo.optimization_barrier") == 1   # in the backward loop's body


@pytest.fixture(scope="module")
def exercise_r5() -> dict:
  """The namespace of R.5's given cell and reference solution (exercises/source/remat.md)."""
  return _exercise_namespace("given-barrier-programs", "exR-5-solution")


def test_exercise_r5_reference_counts_every_program_the_probe_draws(exercise_r5):
  from coursekit.learner.probes import remat as probes
  count = exercise_r5["count_barriers"]
  for seed in range(3):
    for blocks, _ in probes._barrier_cases(np.random.default_rng(seed)):
      assert set(blocks) <= set(probes.BLOCKS) and len(blocks) <= probes.MAX_BLOCKS
  assert set(exercise_r5["BLOCKS"]) == set(probes.BLOCKS)
  for n in range(probes.MAX_BLOCKS + 1):
    for blocks in itertools.product(probes.BLOCKS, repeat=n):
      for differentiated in (False, True):
        for make in (probes.barrier_program, exercise_r5["program"]):
          text = adx.jit(make(blocks, differentiated)).lower(0.5).as_text()
          assert count(blocks, differentiated) == text.count(
              "stablehlo.optimization_barrier"), (blocks, differentiated)


# --- What it costs and what it saves -------------------------------------------------------------

def _mlp(ws, x, mode, np_, checkpoint, scan):
  def step(x, w):
    return x + np_.tanh(x @ w[0]) @ w[1], None
  if mode == "per layer":
    step = checkpoint(step)
  if mode != "every sqrt(n)":
    return np_.sum(scan(step, x, ws)[0] ** 2)
  n = ws[0].shape[0]
  k = math.isqrt(n)
  groups = tuple(np_.reshape(w, (n // k, k, *w.shape[1:])) for w in ws)
  group = checkpoint(lambda x, wg: (scan(step, x, wg)[0], None))
  return np_.sum(scan(group, x, groups)[0] ** 2)


def test_checkpointing_a_scan_of_layers_lowers_xla_temp_memory_as_in_jax():
  n, d, h, b = 16, 8, 32, 128
  rng = np.random.default_rng(0)
  ws = (rng.normal(size=(n, d, h)).astype(np.float32) / 4,
        rng.normal(size=(n, h, d)).astype(np.float32) / 4)
  x = rng.normal(size=(b, d)).astype(np.float32)
  temp = {}
  for mode in ("none", "per layer", "every sqrt(n)"):
    ours = adx.jit(adx.grad(lambda ws, x: _mlp(ws, x, mode, anp, adx.checkpoint, lax.scan)))
    theirs = jax.jit(jax.grad(lambda ws, x: _mlp(ws, x, mode, jnp, jax.checkpoint,
                                                 jax.lax.scan)))
    compiled = ours.lower(ws, x).compile()
    close(compiled(ws, x), theirs(ws, x), tol=2e-4)
    stats = compiled.memory_analysis()
    assert stats.peak_bytes >= stats.temp_size_in_bytes > 0
    temp[mode] = (stats.temp_size_in_bytes,
                  theirs.lower(ws, x).compile().memory_analysis().temp_size_in_bytes)
  for k in (0, 1):   # both libraries: the checkpointed versions need less
    assert temp["per layer"][k] < temp["none"][k] / 2
    assert temp["every sqrt(n)"][k] < temp["none"][k] / 2
  for ours, theirs in temp.values():   # and ours as little as JAX's: the backward
    assert ours <= 1.1 * theirs       # scan reads the weights, doesn't copy them


def test_flops_count_the_recomputation():
  x, w = np.ones((4, 3)), np.ones((3, 3))
  plain = int(adx.flops(adx.grad(_loss, 1))(x, w))
  assert int(adx.flops(adx.grad(adx.checkpoint(_loss, policy=P.everything_saveable), 1))(x, w)) \
      == plain
  remat = int(adx.flops(adx.grad(adx.checkpoint(_loss), 1))(x, w))
  forward = int(adx.flops(_loss)(x, w))
  assert plain < remat <= plain + forward   # at most the forward pass again


# --- The rules, and the split they rest on ------------------------------------------------------

def test_remat_and_name_have_every_rule():
  from autodidax.flop_count import flops_rules
  for prim in (remat_p, name_p):
    for table in (core.impl_rules, core.abstract_eval_rules, ad.jvp_rules, ad.transpose_rules,
                  batching.vmap_rules, lowering.lowering_rules):
      assert prim in table, (prim, table.kind)
  assert remat_p in pe.partial_eval_rules and remat_p in pe.partial_eval_jaxpr_rules
  assert name_p in flops_rules   # remat's cost is its jaxpr's: flop_count runs it


def test_jaxprs_print_remat_as_jax_prints_remat2():
  text = str(adx.make_jaxpr(adx.checkpoint(_loss, policy=P.dots_saveable))(np.ones((2, 3)),
                                                                            np.ones((3, 3))))
  theirs = str(jax.make_jaxpr(jax.checkpoint(lambda x, w: _loss(x, w, jnp),
                                             policy=JP.dots_saveable))(np.ones((2, 3)),
                                                                       np.ones((3, 3))))
  for param in ("differentiated=False", "policy=DotsSaveable(only_if_no_batch_dims=False)",
                "prevent_cse=True"):
    assert param in text and param in theirs
  assert "= remat[" in text and "= remat2[" in theirs
  named = str(adx.make_jaxpr(lambda x: checkpoint_name(x * 2., "two"))(1.))
  assert "name[name=two]" in named
  grad_text = str(adx.make_jaxpr(adx.grad(adx.checkpoint(_loss), 1))(np.ones((2, 3)),
                                                                     np.ones((3, 3))))
  assert grad_text.count("remat[") == 1 and "differentiated=True" in grad_text
  assert "policy=nothing_saveable" in str(adx.make_jaxpr(
      adx.checkpoint(_loss, policy=P.nothing_saveable))(np.ones((2, 3)), np.ones((3, 3))))


def test_partial_eval_with_a_policy_saves_exactly_what_it_allows():
  x, w = np.ones((2, 3)), np.ones((3, 3))
  jaxpr = adx.make_jaxpr(lambda x, w, t, u: adx.jvp(_loss, (x, w), (t, u)))(x, w, x, w).jaxpr
  unknowns = [False, False, True, True]
  for policy, saved_prims in [(P.nothing_saveable, set()), (P.dots_saveable, {"dot_general"}),
                              (P.everything_saveable, None)]:
    jk, js, out_uk, nres = ad_checkpoint.partial_eval_jaxpr_policy(jaxpr, unknowns, policy)
    assert out_uk == [False, True]
    residuals = jk.outvars[len(jk.outvars) - nres:]
    made_by = {v: e.primitive.name for e in jk.eqns for v in e.out_binders}
    computed = {made_by[r] for r in residuals if r in made_by}
    if saved_prims is not None:
      assert computed == saved_prims
    # Whatever the unknown part needs and isn't a residual, it recomputes:
    # both halves together compute the jvp.
    args = [np.linspace(-1, 1, 6).reshape(2, 3), np.eye(3), np.ones((2, 3)), np.ones((3, 3))]
    outs1 = adx.jaxpr.eval_jaxpr(jk, [], *args[:2])
    outs2 = adx.jaxpr.eval_jaxpr(js, [], *outs1[1:], *args[2:])
    close([outs1[0], outs2[0]], adx.jaxpr.eval_jaxpr(jaxpr, [], *args))
  # everything_saveable saves as much as partial evaluation without a policy
  _, _, _, nres_plain = pe.partial_eval_jaxpr(jaxpr, unknowns)
  assert ad_checkpoint.partial_eval_jaxpr_policy(jaxpr, unknowns, P.everything_saveable)[3] \
      == nres_plain


def test_policies_answer_as_jax_policies_do():
  dot = lax.dot_general_p
  avals = (core.ShapedArray((2, 3), np.float32), core.ShapedArray((3, 4), np.float32))
  plain = {"dimension_numbers": (((1,), (0,)), ((), ()))}
  batched = {"dimension_numbers": (((2,), (1,)), ((0,), (0,)))}
  j_dot = jax.lax.dot_general_p
  for name, (ours, theirs) in POLICIES.items():
    if ours is None:
      continue
    for prim, jprim, params in [(dot, j_dot, plain), (dot, j_dot, batched),
                                (lax.sin_p, jax.lax.sin_p, {})]:
      assert bool(ours(prim, *avals, **params)) == bool(theirs(jprim, *avals, **params)), name
    for nm in ("h", "g", "other"):
      from jax._src.ad_checkpoint import name_p as jax_name_p
      assert bool(ours(name_p, avals[0], name=nm)) == bool(theirs(jax_name_p, avals[0], name=nm))


# --- The pictures ---------------------------------------------------------------------------

def test_remat_graph_marks_saved_and_recomputed_equations():
  from autodidax import viz
  x, w = np.ones((2, 3), np.float32), np.ones((3, 3), np.float32)
  everything = viz.remat_graph(_loss, x, w, policy=P.everything_saveable)
  nothing = viz.remat_graph(_loss, x, w)
  dots = viz.remat_graph(_loss, x, w, policy=P.dots_saveable)
  assert "recomputes 0 equations" in everything.name
  assert "saves 2 values" in nothing.name and "nothing_saveable" in nothing.name
  assert "dots_saveable" in dots.name and "saves 3 values" in dots.name
  svg = nothing.pipe(format="svg").decode()
  assert svg.count(">recomputed<") >= 3
  assert svg.count(">saved<") == 2   # the two inputs, and no equation
  svg = everything.pipe(format="svg").decode()
  assert ">recomputed<" not in svg and svg.count(">saved<") > 2
  assert viz.policy_name(P.save_only_these_names("b", "a")) == "save_only_these_names('a', 'b')"
  assert viz.policy_name(P.save_from_both_policies(P.dots_saveable, P.nothing_saveable)) == \
      "save_from_both_policies(dots_saveable, nothing_saveable)"


# --- In JAX today's design (autodidax.stackless) -------------------------------------------------

SL_TRANSFORMS = ["grad", "jit(grad)", "grad(jit)", "vjp", "linearize", "jvp", "vmap(grad)",
                 "grad(vmap)", "grad(grad)", "grad(scan(checkpoint))",
                 "jit(grad(scan(checkpoint)))"]


@pytest.mark.parametrize("transform", SL_TRANSFORMS)
@pytest.mark.parametrize("policy", POLICIES)
def test_checkpoint_agrees_with_jax_in_the_stackless_design(policy, transform):
  from test_custom_derivatives import STACKLESS
  f, g = make_pair(policy)
  ours = TRANSFORMS[transform](f, OURS, STACKLESS.X)(*inputs())
  theirs = TRANSFORMS[transform](g, THEIRS, jax)(*inputs())
  close(ours, theirs)


@pytest.mark.parametrize("policy", POLICIES)
def test_stackless_linearize_saves_what_the_policy_saves(policy):
  """The policy acts in partial evaluation in both designs: the stackless
  linear jaxpr holds as many residuals as Parts 1-4's reverse mode saves."""
  from autodidax import stackless as sl
  f, _ = make_pair(policy)
  x, w, v = inputs()
  _, _, consts, _ = sl.linearize_jaxpr(lambda w: f(x, w, v), w)
  assert len(consts) == len(ad_checkpoint.saved_residuals(lambda w: f(x, w, v), w))
