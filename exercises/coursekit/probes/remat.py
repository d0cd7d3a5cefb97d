"""Probes of the exercises of "Rematerialization".

Each probe runs the learner's answer on inputs from `p.rng` and records what
comes out; the reference solution's records at the same seed decide.
"""
import collections

import numpy as np

import autodidax as adx
import autodidax.numpy as anp
from autodidax import lax
from autodidax.ad_checkpoint import checkpoint_name, name_p
from autodidax.core import ShapedArray

from ..probe import probe

P = adx.checkpoint_policies
F32, F64 = np.dtype("float32"), np.dtype("float64")


def _residual_count(f, *args):
  """How many values reverse mode of `f` saves (the linear jaxpr's constants)."""
  return len(adx.linearize(f, *args)[1].jaxpr.consts)


# --- R.1: the split that follows a policy -------------------------------------------------

def _census(eqns) -> str:
  """The primitives of some equations, counted: "cos, dot_general ×2, mul ×3"."""
  counts = collections.Counter(e.primitive.name for e in eqns)
  return ", ".join(name if n == 1 else f"{name} ×{n}" for name, n in sorted(counts.items()))


def _mlp(x, w, v):
  h = checkpoint_name(anp.tanh(x @ w), "h")
  return anp.sum(anp.sin(h @ v) * h[:, :2])


def _with_jit(x, w, v):          # a jitted piece inside: split_eqn splits it
  inner = adx.jit(lambda x, w: anp.exp(anp.sin(x @ w)))
  return anp.sum(inner(x, w) @ v)


def _chain(x, w, v):
  for _ in range(3):
    x = anp.cos(x @ w) * x
  return anp.sum(x @ v)


@probe("R.1", answers=("split_by_policy",),
       removes={"autodidax.ad_checkpoint:split_by_policy": "split_by_policy"})
def probe_R_1(p, split_by_policy):
  x, w = p.rng.normal(size=(3, 4)), p.rng.normal(size=(4, 4)) / 2
  v = p.rng.normal(size=(4, 2))
  policies = [("nothing_saveable", P.nothing_saveable),
              ("everything_saveable", P.everything_saveable),
              ("dots_saveable", P.dots_saveable),
              ("save_only_these_names('h')", P.save_only_these_names("h"))]
  for fname, f in [("an MLP layer", _mlp), ("a chain of three layers", _chain)]:
    n = 3
    jvp = adx.make_jaxpr(lambda *a: adx.jvp(f, a[:n], a[n:]))(x, w, v, x, w, v).jaxpr
    for pname, policy in policies:
      what = f"split_by_policy of the JVP of {fname}, policy {pname}"
      out = p.call(what, split_by_policy, jvp, [False] * n + [True] * n, policy)
      ok = isinstance(out, (tuple, list)) and len(out) == 3
      p.value(f"{what}: returns three things", ok)
      if not ok:
        return
      known, staged, out_uk = out
      p.value(f"{what}: the primitives that run now", _census(known))
      p.value(f"{what}: the primitives staged", _census(staged))
      p.value(f"{what}: which outputs are unknown", list(out_uk))
  jaxpr = adx.make_jaxpr(lambda a, b: (a * 2., b, 3., anp.sin(a) + b))(1., 2.).jaxpr
  p.value("split_by_policy with a literal output and an input as an output",
          p.call("split_by_policy with literals", split_by_policy, jaxpr, [False, True],
                 P.nothing_saveable)[2])
  for pname, policy in policies:
    for fname, f in [("an MLP layer", _mlp), ("a chain of three layers", _chain),
                     ("a jitted piece inside", _with_jit)]:
      ck = adx.checkpoint(f, policy=policy)
      p.value(f"grad of checkpoint({fname}), policy {pname}",
              p.call(f"grad of checkpoint({fname})", adx.grad(ck, (0, 1, 2)), x, w, v))
      p.value(f"residuals saved by checkpoint({fname}), policy {pname}",
              p.call(f"linearize of checkpoint({fname})", _residual_count, ck, x, w, v))
  xs = p.rng.normal(size=(4, 3, 4))

  def scanned(xs, w):
    body = adx.checkpoint(lambda c, x: (c + _mlp(x, w, v), anp.sum(x)),
                          policy=P.dots_saveable)
    return lax.scan(body, 0., xs)[0]
  p.value("jit(grad) of scan(checkpoint(body))",
          p.call("jit(grad) of a scan of a checkpointed body",
                 adx.jit(adx.grad(scanned, (0, 1))), xs, w))


# --- R.2: a policy, and two of them ---------------------------------------------------------

def _dot_cases():
  f = lambda *shape: ShapedArray(shape, F32)
  return [  # (what, avals, dimension_numbers)
      ("a matrix product", (f(2, 3), f(3, 4)), (((1,), (0,)), ((), ()))),
      ("a matrix-vector product", (f(2, 3), f(3)), (((1,), (0,)), ((), ()))),
      ("a batched matrix product", (f(5, 2, 3), f(5, 3, 4)), (((2,), (1,)), ((0,), (0,)))),
      ("an outer product", (f(2), f(3)), (((), ()), ((), ()))),
      ("a product batched on the left only", (f(5, 2, 3), f(5, 3)),
       (((2,), (1,)), ((0,), (0,)))),
  ]


@probe("R.2", answers=("weights_products", "either"),
       removes={"autodidax.ad_checkpoint:DotsSaveable.__call__": None,
                "autodidax.ad_checkpoint:SaveFromBothPolicies.__call__": None})
def probe_R_2(p, weights_products, either):
  for what, avals, dn in _dot_cases():
    p.given(operands=tuple(a.str_short() for a in avals), dimension_numbers=dn)
    p.value(f"weights_products of {what}",
            p.call(f"weights_products of {what}", weights_products, lax.dot_general_p, *avals,
                   dimension_numbers=dn))
  p.given()
  a = ShapedArray((3,), F64)
  for prim, params in [(lax.sin_p, {}), (lax.mul_p, {}), (lax.reduce_sum_p, {"axes": (0,)}),
                       (name_p, {"name": "h"})]:
    p.value(f"weights_products of {prim.name}",
            p.call(f"weights_products of {prim.name}", weights_products, prim, a, **params))
  names = lambda *ns: (lambda prim, *avals, **params: prim is name_p and params["name"] in ns)
  mul_only = lambda prim, *avals, **params: 1 if prim is lax.mul_p else 0   # truthy ints
  both = p.call("either(weights_products, a policy saving names)", either, weights_products,
                names("h", "g"))
  trio = p.call("either(mul_only, either(...))", either, mul_only, both)
  dots = _dot_cases()
  cases = [(dots[0][0], lax.dot_general_p, dots[0][1], {"dimension_numbers": dots[0][2]}),
           (dots[2][0], lax.dot_general_p, dots[2][1], {"dimension_numbers": dots[2][2]}),
           ("a value named h", name_p, (a,), {"name": "h"}),
           ("a value named z", name_p, (a,), {"name": "z"}),
           ("mul", lax.mul_p, (a, a), {}), ("sin", lax.sin_p, (a,), {})]
  for what, prim, avals, params in cases:
    got = p.call(f"the combined policy on {what}", both, prim, *avals, **params)
    p.value(f"either(weights_products, names h and g) on {what}: a bool",
            type(got) is bool and got)
    got = p.call(f"the combination of three on {what}", trio, prim, *avals, **params)
    p.value(f"either(mul_only, ...) on {what}: True or False", got if type(got) is bool
            else f"not a bool but {got!r}, of type {type(got).__name__}")

  x, w = p.rng.normal(size=(4, 3)), p.rng.normal(size=(3, 3)) / 2
  v = p.rng.normal(size=(4, 3, 3)) / 2

  def model(x, w, v):
    h = checkpoint_name(anp.sin(x @ w), "h")
    g = anp.reshape(anp.reshape(h, (4, 1, 3)) @ v, (4, 3))   # batched
    return anp.sum(anp.tanh(g) * h)

  for what, policy in [("weights_products", weights_products), ("either", both),
                       ("either of three", trio)]:
    ck = adx.checkpoint(model, policy=policy)
    p.value(f"grad of checkpoint(model, {what})",
            p.call(f"grad with {what}", adx.grad(ck, (0, 1, 2)), x, w, v))
    p.value(f"residuals saved with {what}",
            p.call(f"linearize with {what}", _residual_count, ck, x, w, v))
  p.value("jit(grad) with either",
          p.call("jit(grad) with either", adx.jit(adx.grad(adx.checkpoint(model, policy=both))),
                 x, w, v))


# --- R.3: predict the saved residuals ----------------------------------------------------------
# f(x) = sum(op_n(...op_1(x))) for x: f64[3], each op one of OPS ("name" names its
# input "h"), reverse mode of f itself (policy None) or of checkpoint(f, policy=...).

NONLINEAR = ("sin", "cos", "exp", "log", "tanh", "square")
OPS = NONLINEAR + ("name",)
POLICIES = {None: None, "nothing_saveable": P.nothing_saveable,
            "everything_saveable": P.everything_saveable,
            "save_only_these_names('h')": P.save_only_these_names("h")}
MAX_OPS = 3   # the longest chain the probe draws (tests/test_remat.py checks every one)
_APPLY = {"sin": anp.sin, "cos": anp.cos, "exp": anp.exp, "log": anp.log, "tanh": anp.tanh,
          "square": lambda v: v * v, "name": lambda v: checkpoint_name(v, "h")}


def chain(ops, policy):
  """The function that `predict_residuals(ops, policy)` is about."""
  def f(x):
    for op in ops:
      x = _APPLY[op](x)
    return anp.sum(x)
  return f if policy is None else adx.checkpoint(f, policy=POLICIES[policy])


def _residual_cases(rng) -> list[tuple]:
  """Eight (ops, policy): three chains without a checkpoint, which use every op between
  them; one with everything saveable, where an op's output is saved for the next op
  after a value made for its own tangent; then a checkpoint, two that save h, and a
  chain that starts with the same op twice (two values, saved by the same primitive)."""
  pick = lambda ops, n=None: [str(op) for op in rng.choice(ops, n)] if n else str(rng.choice(ops))
  pool = [*NONLINEAR, "name", *pick(NONLINEAR, 2)]
  rng.shuffle(pool)
  cases = [(tuple(str(op) for op in pool[i:i + 3]), None) for i in (0, 3, 6)]
  ordered = (pick(("sin", "cos", "tanh")), pick(("log", "square")), pick(NONLINEAR))
  cases.append((ordered, "everything_saveable"))
  a, b, c = pick(NONLINEAR, 3)
  cases.append(((a, b, c), "nothing_saveable"))
  cases.append(((a, "name", b), "save_only_these_names('h')"))   # h in the middle
  edge = ("name", c, a) if rng.random() < .5 else (c, a, "name")   # h first or last
  cases.append((edge, "save_only_these_names('h')"))
  twice = pick(("sin", "cos", "tanh", "exp"))   # two ops that each save a value of one kind
  cases.append(((twice, twice, pick(NONLINEAR)), None))
  return cases


@probe("R.3", answers=("predict_residuals",),
       removes={"autodidax.ad_checkpoint:saved_residuals": None,
                "autodidax.ad_checkpoint:print_saved_residuals": None,
                "autodidax.ad_checkpoint:_describe_residuals": None,
                "autodidax.viz.remat:remat_split": None,
                "autodidax.viz.remat:remat_graph": None})
def probe_R_3(p, predict_residuals):
  cases = _residual_cases(p.rng)
  for i, (ops, policy) in enumerate(cases, 1):
    what = f"case {i} of {len(cases)}"
    p.given(ops=ops, policy=policy)
    answer = p.call(f"predict_residuals, {what}", predict_residuals, ops, policy)
    if isinstance(answer, (list, tuple)):
      answer = [" ".join(str(a).split()) for a in answer]
    else:
      answer = f"not a list but a {type(answer).__name__}"
    p.value(f"the residuals, {what}", answer)
  p.given()


# --- R.4: checkpoints in a scan, on a memory budget --------------------------------------------

DEPTHS, MEMORY_DEPTH = (4, 9, 16), 16   # the statement names them


def _problem(p, n, d=16, h=64, b=256):
  ws = ((p.rng.normal(size=(n, d, h)) / 4).astype(F32),
        (p.rng.normal(size=(n, h, d)) / 8 / n).astype(F32))
  return ws, p.rng.normal(size=(b, d)).astype(F32)


_PLAIN_GRAD = None   # jit(grad(plain_loss)), built once: its temp memory depends on shapes only


def _temp(jitted, ws, x) -> int:
  """XLA's temp memory for `jitted` at these arguments (a compile that `jitted(ws, x)`
  shares, or reuses)."""
  return jitted.lower(ws, x).compile().memory_analysis().temp_size_in_bytes


def _plain_loss(ws, x):   # the notebook's plain_loss (the probe's own copy)
  def layer_step(x, w):
    return x + anp.tanh(x @ w[0]) @ w[1], None
  x, _ = lax.scan(layer_step, x, ws)
  return anp.sum(x * x)


def _gradient_summary(grads, picks) -> dict:
  """A gradient (of ws: two stacks of n matrices) in a few numbers, for the records: its
  dtypes, the norm of each layer's matrices, and the entries at `picks` (4 per stack)."""
  dtypes = [str(np.asarray(g).dtype) for g in grads]
  g1, g2 = (np.asarray(g, np.float64) for g in grads)
  return {"dtypes": dtypes, "norms": np.stack([np.linalg.norm(g, axis=(1, 2)) for g in (g1, g2)]),
          "entries": np.array([g1[i] for i in picks[:4]] + [g2[i] for i in picks[4:]])}


@probe("R.4", answers=("budget_loss",))
def probe_R_4(p, budget_loss):
  global _PLAIN_GRAD
  if _PLAIN_GRAD is None:
    _PLAIN_GRAD = adx.jit(adx.grad(_plain_loss))
  for n in DEPTHS:   # compiled at one depth only: compiling is what takes time
    ws, x = _problem(p, n)
    p.value(f"{n} layers: the loss", p.call(f"budget_loss with {n} layers",
                                            budget_loss, ws, x), rtol=1e-4, atol=1e-4)
    grad = adx.grad(budget_loss)
    if n == MEMORY_DEPTH:
      grad = adx.jit(grad)
    grads = p.call(f"{'jit(grad' if n == MEMORY_DEPTH else '(grad'}(budget_loss)), {n} layers",
                   grad, ws, x)
    picks = [tuple(int(p.rng.integers(k)) for k in w.shape) for w in ws for _ in range(4)]
    p.value(f"{n} layers: the gradient, each layer's norm and a few entries",
            p.call(f"the gradient of budget_loss, {n} layers", _gradient_summary, grads, picks),
            rtol=2e-4, atol=1e-5)
    if n != MEMORY_DEPTH:
      continue
    mine = p.call(f"compiling jit(grad(budget_loss)), {n} layers", _temp, grad, ws, x)
    plain = _temp(_PLAIN_GRAD, ws, x)
    p.value(f"{n} layers: temp memory at most half of plain_loss's", mine * 2 <= plain,
            detail=f"temp memory: yours {mine:,} bytes, plain_loss's {plain:,}, "
                   f"the limit {plain // 2:,}")


# --- R.5: why prevent_cse ----------------------------------------------------------------------

BLOCKS = {"sin": anp.sin, "checkpoint": adx.checkpoint(anp.sin),
          "checkpoint(prevent_cse=False)": adx.checkpoint(anp.sin, prevent_cse=False),
          "nested": adx.checkpoint(lambda v: anp.cos(adx.checkpoint(anp.sin)(v)))}
MAX_BLOCKS = 3   # the longest program the probe draws (tests/test_remat.py checks every one)


def barrier_program(blocks, differentiated):
  """The program that `count_barriers(blocks, differentiated)` is about."""
  def g(x):
    for block in blocks:
      x = BLOCKS[block](x)
    return x
  return adx.grad(g) if differentiated else g


def _barrier_cases(rng) -> list[tuple]:
  """Six (blocks, differentiated): three differentiated programs of three blocks, which use
  every block between them, one of two blocks, and two that aren't differentiated (the
  first with a checkpoint that prevents CSE)."""
  pick = lambda n, blocks=tuple(BLOCKS): [str(b) for b in rng.choice(blocks, n)]
  pool = [*BLOCKS, *pick(5)]
  rng.shuffle(pool)
  cases = [(tuple(pool[i:i + 3]), True) for i in (0, 3, 6)]
  undifferentiated = [*pick(1, ("checkpoint", "nested")), *pick(2)]
  rng.shuffle(undifferentiated)
  return cases + [(tuple(pick(2)), True), (tuple(undifferentiated), False),
                  (tuple(pick(2)), False)]


@probe("R.5", answers=("BARRIER", "count_barriers"))
def probe_R_5(p, BARRIER, count_barriers):
  ok = isinstance(BARRIER, dict) and sorted(BARRIER) == ["scan", "where", "without"]
  p.value("BARRIER has the keys where, without and scan", ok)
  if ok:
    for key in ("where", "without", "scan"):
      p.value(f"BARRIER[{key!r}]", str(BARRIER[key]).strip().lower(), secret=True)
  cases = _barrier_cases(p.rng)
  for i, (blocks, differentiated) in enumerate(cases, 1):
    what = f"case {i} of {len(cases)}"
    p.given(blocks=blocks, differentiated=differentiated)
    p.value(f"count_barriers, {what}",
            p.call(f"count_barriers, {what}", count_barriers, blocks, differentiated))
  p.given()
