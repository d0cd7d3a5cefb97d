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

from ..probe import probe, short

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


def _mlp(x, ws, v):              # ws: one matrix per hidden layer, each output named h
  for w in ws:
    x = checkpoint_name(anp.tanh(x @ w), "h")
  return anp.sum(anp.sin(x @ v) * x[:, :2])


def _with_jit(x, ws, v):         # a jitted piece per layer: split_eqn splits it
  inner = adx.jit(lambda x, w: anp.exp(anp.sin(x @ w)))
  for w in ws:
    x = inner(x, w)
  return anp.sum(x @ v)


def _chain(x, ws, v):
  for w in ws:
    x = anp.cos(x @ w) * x
  return anp.sum(x @ v)


FUNCTIONS = [("an MLP", _mlp), ("a chain of layers", _chain), ("jitted layers", _with_jit)]


@probe("R.1", answers=("split_by_policy",),
       removes={"autodidax.ad_checkpoint:split_by_policy": "split_by_policy"})
def probe_R_1(p, split_by_policy):
  # Each function gets 1 to 3 layers, and the JVP's primal inputs are each unknown at
  # random (its tangents always are): the seed decides what the split sees.
  layers = {fname: int(p.rng.integers(1, 4)) for fname, _ in FUNCTIONS}
  x, v = p.rng.normal(size=(3, 4)), p.rng.normal(size=(4, 2))
  wss = {fname: tuple(p.rng.normal(size=(4, 4)) / 2 for _ in range(n))
         for fname, n in layers.items()}
  policies = [("nothing_saveable", P.nothing_saveable),
              ("everything_saveable", P.everything_saveable),
              ("dots_saveable", P.dots_saveable),
              ("save_only_these_names('h')", P.save_only_these_names("h"))]
  for fname, f in FUNCTIONS[:2]:
    ws, n = wss[fname], layers[fname] + 2
    unflat = lambda a: (a[0], a[1:-1], a[-1])
    g = lambda *a: adx.jvp(f, unflat(a[:n]), unflat(a[n:]))
    jvp = adx.make_jaxpr(g)(x, *ws, v, x, *ws, v).jaxpr
    in_unknowns = [bool(u) for u in p.rng.random(n) < .3] + [True] * n
    p.given(layers=layers[fname], in_unknowns=in_unknowns)
    for pname, policy in policies:
      what = f"split_by_policy of the JVP of {fname}, policy {pname}"
      out = p.call(what, split_by_policy, jvp, in_unknowns, policy)
      if not (isinstance(out, (tuple, list)) and len(out) == 3):
        p.value(f"{what}: the primitives that run now",
                f"not three things but {type(out).__name__} {short(out)}")
        return
      known, staged, out_uk = out
      p.value(f"{what}: the primitives that run now", _census(known))
      p.value(f"{what}: the primitives staged", _census(staged))
      p.value(f"{what}: which outputs are unknown", list(out_uk))
  outs = [lambda a, b: a * 2., lambda a, b: b, lambda a, b: 3.,
          lambda a, b: anp.sin(a) + b]
  order = [int(i) for i in p.rng.permutation(4)]
  in_unknowns = [False, bool(p.rng.random() < .5)]   # a known: its product with a literal too
  jaxpr = adx.make_jaxpr(lambda a, b: tuple(outs[i](a, b) for i in order))(1., 2.).jaxpr
  p.given(outputs=[["a * 2.", "b", "3.", "sin(a) + b"][i] for i in order],
          in_unknowns=in_unknowns)
  p.value("split_by_policy with a literal output and an input as an output",
          p.call("split_by_policy with literals", split_by_policy, jaxpr, in_unknowns,
                 P.nothing_saveable)[2])
  for fname, f in FUNCTIONS:
    p.given(layers=layers[fname])
    for pname, policy in policies:
      ck = adx.checkpoint(f, policy=policy)
      p.value(f"grad of checkpoint({fname}), policy {pname}",
              p.call(f"grad of checkpoint({fname})", adx.grad(ck, (0, 1, 2)), x, wss[fname], v))
      p.value(f"residuals saved by checkpoint({fname}), policy {pname}",
              p.call(f"linearize of checkpoint({fname})", _residual_count, ck, x, wss[fname], v))
  p.given()
  xs, w = p.rng.normal(size=(4, 3, 4)), p.rng.normal(size=(4, 4)) / 2

  def scanned(xs, w):
    body = adx.checkpoint(lambda c, x: (c + _mlp(x, (w,), v), anp.sum(x)),
                          policy=P.dots_saveable)
    return lax.scan(body, 0., xs)[0]
  p.value("jit(grad) of scan(checkpoint(body))",
          p.call("jit(grad) of a scan of a checkpointed body",
                 adx.jit(adx.grad(scanned, (0, 1))), xs, w))


# --- R.2: a policy, and two of them ---------------------------------------------------------

def _dot_case(rng):
  """A random dot_general: (what, avals, dimension_numbers), batched on neither side, on
  both, or (as the library's batching rule may leave it) on the left only."""
  f = lambda *shape: ShapedArray(shape, F32)
  m, k, n, b = (int(d) for d in rng.integers(2, 6, size=4))
  kind = str(rng.choice(["a matrix product", "a matrix-vector product", "an outer product",
                         "a batched matrix product", "a product batched on the left only"]))
  return {"a matrix product": (kind, (f(m, k), f(k, n)), (((1,), (0,)), ((), ()))),
          "a matrix-vector product": (kind, (f(m, k), f(k)), (((1,), (0,)), ((), ()))),
          "an outer product": (kind, (f(m), f(n)), (((), ()), ((), ()))),
          "a batched matrix product": (kind, (f(b, m, k), f(b, k, n)),
                                       (((2,), (1,)), ((0,), (0,)))),
          "a product batched on the left only": (kind, (f(b, m, k), f(b, k)),
                                                 (((2,), (1,)), ((0,), (0,))))}[kind]


def _policy_cases(rng) -> list[tuple]:
  """Equations to ask a policy about, in a random order: (what, prim, avals, params).
  Four random dot_generals, a value named by a random name, and sin, mul, reduce_sum."""
  a = ShapedArray((int(rng.integers(2, 6)),), F64)
  cases = [(what, lax.dot_general_p, avals, {"dimension_numbers": dn})
           for what, avals, dn in (_dot_case(rng) for _ in range(4))]
  name = str(rng.choice(["h", "g", "z", "k"]))
  cases += [(f"a value named {name}", name_p, (a,), {"name": name}),
            ("sin", lax.sin_p, (a,), {}), ("mul", lax.mul_p, (a, a), {}),
            ("reduce_sum", lax.reduce_sum_p, (a,), {"axes": (0,)})]
  return [cases[int(i)] for i in rng.permutation(len(cases))]


def _ask(p, label, policy, cases, bools=True):
  """Ask `policy` about each case; record the answers as one list."""
  p.given(equations=[f"{what}: {', '.join(a.str_short() for a in avals)}"
                     for what, _, avals, _ in cases])
  answers = []
  for i, (_, prim, avals, params) in enumerate(cases, 1):
    got = p.call(f"{label} on equation {i}", policy, prim, *avals, **params)
    answers.append(got if not bools or type(got) is bool
                   else f"not a bool but {got!r}, of type {type(got).__name__}")
  p.value(f"{label} on each equation", answers)
  p.given()


@probe("R.2", answers=("weights_products", "either"),
       removes={"autodidax.ad_checkpoint:DotsSaveable.__call__": None,
                "autodidax.ad_checkpoint:SaveFromBothPolicies.__call__": None})
def probe_R_2(p, weights_products, either):
  _ask(p, "weights_products", weights_products, _policy_cases(p.rng), bools=False)
  names = lambda *ns: (lambda prim, *avals, **params: prim is name_p and params["name"] in ns)
  mul_only = lambda prim, *avals, **params: 1 if prim is lax.mul_p else 0   # truthy ints
  both = p.call("either(weights_products, a policy saving names)", either, weights_products,
                names("h", "g"))
  trio = p.call("either(mul_only, either(...))", either, mul_only, both)
  cases = _policy_cases(p.rng)
  _ask(p, "either(weights_products, names h and g)", both, cases)
  _ask(p, "either(mul_only, either(...)), mul_only answering 1 or 0,", trio, cases)

  layers = int(p.rng.integers(1, 4))
  x, v = p.rng.normal(size=(4, 3)), p.rng.normal(size=(4, 3, 3)) / 2
  ws = tuple(p.rng.normal(size=(3, 3)) / 2 for _ in range(layers))

  def model(x, ws, v):
    for w in ws:
      h = checkpoint_name(anp.sin(x @ w), "h")
      g = anp.reshape(anp.reshape(h, (4, 1, 3)) @ v, (4, 3))   # batched
      x = anp.tanh(g) * h
    return anp.sum(x)

  p.given(layers=layers)
  for what, policy in [("weights_products", weights_products), ("either", both),
                       ("either of three", trio)]:
    ck = adx.checkpoint(model, policy=policy)
    p.value(f"grad of checkpoint(model, {what})",
            p.call(f"grad with {what}", adx.grad(ck, (0, 1, 2)), x, ws, v))
    p.value(f"residuals saved with {what}",
            p.call(f"linearize with {what}", _residual_count, ck, x, ws, v))
  p.value("jit(grad) with either",
          p.call("jit(grad) with either", adx.jit(adx.grad(adx.checkpoint(model, policy=both))),
                 x, ws, v))
  p.given()


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
  chain that starts with the same op twice (two values, saved by the same primitive); in a
  random order, so that no case's answer is the same at every seed."""
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
  return [cases[int(i)] for i in rng.permutation(len(cases))]


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
    summary = p.call(f"the gradient of budget_loss, {n} layers", _gradient_summary, grads, picks)
    if n != MEMORY_DEPTH:
      p.value(f"{n} layers: the gradient, each layer's norm and a few entries", summary,
              rtol=2e-4, atol=1e-5)
      continue
    # The budget, recorded with this seed's gradient: a yes alone would be the same at
    # every seed, so it would ship as the answer.
    mine = p.call(f"compiling jit(grad(budget_loss)), {n} layers", _temp, grad, ws, x)
    plain = _temp(_PLAIN_GRAD, ws, x)
    summary["temp memory at most half of plain_loss's"] = mine * 2 <= plain
    p.value(f"{n} layers: the gradient, and temp memory at most half of plain_loss's", summary,
            rtol=2e-4, atol=1e-5,
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
  first with a checkpoint that prevents CSE), in a random order."""
  pick = lambda n, blocks=tuple(BLOCKS): [str(b) for b in rng.choice(blocks, n)]
  pool = [*BLOCKS, *pick(5)]
  rng.shuffle(pool)
  cases = [(tuple(pool[i:i + 3]), True) for i in (0, 3, 6)]
  undifferentiated = [*pick(1, ("checkpoint", "nested")), *pick(2)]
  rng.shuffle(undifferentiated)
  cases += [(tuple(pick(2)), True), (tuple(undifferentiated), False), (tuple(pick(2)), False)]
  return [cases[int(i)] for i in rng.permutation(len(cases))]


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
