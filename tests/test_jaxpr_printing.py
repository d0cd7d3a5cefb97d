"""Jaxprs (Part 2): the printer. Variable names, line breaking, literals and
params, nested jaxprs, compared with what jax.make_jaxpr prints."""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import autodidax as adx
import autodidax.numpy as anp
from autodidax import core, lax
from autodidax.core import ShapedArray
from autodidax.jaxpr import Jaxpr, JaxprEqn, Lit, Var, pp_jaxpr, typecheck_jaxpr

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:jax.*")

F64 = ShapedArray((), np.float64)
F32 = ShapedArray((), np.float32)

# Our primitive names that JAX spells differently.
JAX_NAME = {"greater": "gt", "less": "lt", "greater_equal": "ge", "less_equal": "le",
            "broadcast": "broadcast_in_dim"}


# ============================================================================================
# The printer
# ============================================================================================

def _normalize_jax(text):
  """JAX's printout in our vocabulary: our primitive names, without the params we don't have."""
  for ours, theirs in JAX_NAME.items():
    text = re.sub(rf"= {theirs}\b", f"= {ours}", text)
  text = re.sub(r"\s*\b(out_sharding|sharding|dimensions|accuracy|preferred_element_type)"
                r"=None\b", "", text)
  text = re.sub(r"\s*\bweak_type=False\b", "", text)
  text = re.sub(r"\s*\bpreferred_element_type=\w+", "", text)
  return text.replace("[ ", "[")


# Params spelled differently (ours: broadcast axes, tuples; JAX's: broadcast_dimensions, lists).
PARAMS_DIFFER = ("broadcast", "dot_general")


def _drop_params(text, prim):
  """`prim[...] ` -> `prim ` (brackets may nest)."""
  out, i = [], 0
  for m in re.finditer(rf"= {prim}\[", text):
    if m.start() < i:
      continue
    out.append(text[i:m.end() - 1])
    depth, j = 0, m.end() - 1
    while True:
      depth += {"[": 1, "]": -1}.get(text[j], 0)
      j += 1
      if depth == 0:
        break
    i = j
  return "".join(out) + text[i:]


def _tokens(text):
  text = re.sub(r"\s*\bweak_type=False\b", "", text)   # both print it; the tests compare the rest
  for prim in PARAMS_DIFFER:
    text = _drop_params(text, prim)
  return re.sub(r"(?<=[a-z_])\[\s*\]", "", text).split()


def _same_structure(ours, theirs):
  """Equal token for token after normalizing (layout may differ: JAX's extra
  params make some of its lines longer)."""
  a = _tokens(str(ours))
  b = _tokens(_normalize_jax(str(theirs)))
  assert a == b, f"\nours:   {ours}\ntheirs: {theirs}"


def test_names_go_a_to_z_then_ba():
  def chain(x):
    for _ in range(30):
      x = lax.sin(x)
    return x
  closed = adx.make_jaxpr(chain)(1.0)
  text = str(closed)
  lines = text.splitlines()
  names = [l.split(":")[0].strip() for l in lines[1:-1]]
  assert names == list("bcdefghijklmnopqrstuvwxyz") + ["ba", "bb", "bc", "bd", "be"]
  assert lines[-1] == "  in (be,) }"
  assert text == str(jax.make_jaxpr(lambda x: chain_jax(x))(1.0))


def chain_jax(x):
  for _ in range(30):
    x = jax.lax.sin(x)
  return x


def test_names_continue_past_zz():
  from autodidax.jaxpr import _nth_name
  # as JAX: base 26 with a = 0, so two letters run from ba (26) to zz (675)
  assert [_nth_name(i) for i in (0, 25, 26, 27, 51, 52, 675, 676)] == [
      "a", "z", "ba", "bb", "bz", "ca", "zz", "baa"]


def test_one_line_when_it_fits():
  text = str(adx.make_jaxpr(lambda x: lax.mul(lax.sin(x), 2.0))(np.ones(3)))
  assert text == "{ lambda ; a:f64[3]. let b:f64[3] = sin a; c:f64[3] = mul b 2.0:f64[] in (c,) }"
  assert len(text) <= 80


def test_multi_line_when_longer_than_80():
  f = lambda x: lax.cos(lax.mul(lax.sin(x), 2.0))
  text = str(adx.make_jaxpr(f)(np.ones(3)))
  one_line = ("{ lambda ; a:f64[3]. let b:f64[3] = sin a; c:f64[3] = mul b 2.0:f64[]; "
              "d:f64[3] = cos c in (d,) }")
  assert len(one_line) > 80
  assert text == ("{ lambda ; a:f64[3]. let\n"
                  "    b:f64[3] = sin a\n"
                  "    c:f64[3] = mul b 2.0:f64[]\n"
                  "    d:f64[3] = cos c\n"
                  "  in (d,) }")
  assert text == str(jax.make_jaxpr(lambda x: jax.lax.cos(jax.lax.mul(jax.lax.sin(x), 2.0)))(
      np.ones(3)))


def test_exactly_80_columns_is_one_line():
  x = Var(ShapedArray((3,), np.float64))
  one = pp_jaxpr(Jaxpr([], [x], [], [x]))
  assert one == "{ lambda ; a:f64[3]. let  in (a,) }"
  # pad the jaxpr with inputs until its one-line form is 80 or 81 characters
  for n in range(1, 20):
    xs = [Var(ShapedArray((3,), np.float64)) for _ in range(n)]
    j = Jaxpr([], xs, [], xs[:1])
    flat = "{ lambda ; " + " ".join(f"{chr(97 + i)}:f64[3]" for i in range(n)) + ". let  in (a,) }"
    if len(flat) <= 80:
      assert pp_jaxpr(j) == flat
    else:
      assert "\n" in pp_jaxpr(j)


def test_literal_formatting():
  x = Var(F32)
  y, z, w, v = Var(F32), Var(F32), Var(ShapedArray((), np.int32)), Var(ShapedArray((), np.bool_))
  i = Var(ShapedArray((), np.int32))
  b = Var(ShapedArray((), np.bool_))
  j = Jaxpr([], [x, i, b], [
      JaxprEqn(lax.mul_p, [x, Lit(np.float32(2.0))], {}, [y]),
      JaxprEqn(lax.add_p, [y, Lit(0.5)], {}, [z]),
      JaxprEqn(lax.mul_p, [i, Lit(np.int32(3))], {}, [w]),
      JaxprEqn(lax.and_p, [b, Lit(True)], {}, [v])], [z, w, v])
  text = pp_jaxpr(j)
  assert "mul a 2.0:f32[]" in text
  assert "add d 0.5:f64[]" in text
  assert "mul b 3:i32[]" in text
  assert "and c True:bool[]" in text
  typecheck_jaxpr(j)


def test_literal_formatting_matches_jax():
  f = lambda x: jax.lax.mul(x, np.float32(2.0))
  ours = adx.make_jaxpr(lambda x: lax.mul(x, np.float32(2.0)))(np.ones(3, np.float32))
  assert str(ours) == str(jax.make_jaxpr(f)(np.ones(3, np.float32)))
  ours = adx.make_jaxpr(lambda x: lax.mul(x, np.int32(-3)))(np.ones(3, np.int32))
  theirs = jax.make_jaxpr(lambda x: jax.lax.mul(x, np.int32(-3)))(np.ones(3, np.int32))
  assert str(ours) == str(theirs) and "-3:i32[]" in str(ours)


def test_params_are_sorted():
  p = core.Primitive("params_for_test_jaxpr")
  x, y = Var(F64), Var(F64)
  j = Jaxpr([], [x], [JaxprEqn(p, [x], {"zeta": 1, "alpha": (0, 1), "mid": np.dtype("float32"),
                                         "one": (2,)}, [y])], [y])
  assert "params_for_test_jaxpr[alpha=(0, 1) mid=float32 one=(2,) zeta=1] a" in pp_jaxpr(j)


def test_nested_jit_prints_params_on_their_own_lines():
  text = str(adx.make_jaxpr(lambda x: lax.cos(adx.jit(lax.sin)(x)))(np.ones(3)))
  lines = text.splitlines()
  assert lines[0] == "{ lambda ; a:f64[3]. let"
  assert lines[1] == "    b:f64[3] = xla_call["
  # each param on its own line, sorted, two columns further in
  params = lines[2:-3]
  assert all(l.startswith("      ") and not l.startswith("       ") for l in params)
  keys = [l.strip().split("=")[0] for l in params]
  assert keys == sorted(keys) and "jaxpr" in keys and "name" in keys
  jaxpr_line = next(l for l in params if l.strip().startswith("jaxpr="))
  assert re.fullmatch(r" {6}jaxpr=\{ lambda ; (\w+):f64\[3\]\. let (\w+):f64\[3\] = sin \1 "
                      r"in \(\2,\) \}", jaxpr_line), jaxpr_line
  assert lines[-3] == "    ] a"
  # the inner jaxpr's names come from the same sequence (c, d), so cos binds e
  assert lines[-2] == "    e:f64[3] = cos b"
  assert lines[-1] == "  in (e,) }"


def test_nested_jit_long_inner_jaxpr_is_indented():
  def g(x):
    for _ in range(4):
      x = lax.sin(x)
    return x
  text = str(adx.make_jaxpr(adx.jit(g))(np.ones(3)))
  lines = text.splitlines()
  start = next(i for i, l in enumerate(lines) if "jaxpr={" in l)
  assert lines[start].startswith("      jaxpr={ lambda ; ") and lines[start].endswith(". let")
  inner = lines[start + 1:start + 5]
  assert all(re.fullmatch(r" {10}\w+:f64\[3\] = sin \w+", l) for l in inner), inner
  assert re.fullmatch(r" {8}in \(\w+,\) \}", lines[start + 5]), lines[start + 5]
  # the same layout as JAX's jit (whose inner names restart at a)
  theirs = str(jax.make_jaxpr(jax.jit(lambda x: chain4_jax(x)))(np.ones(3))).splitlines()
  t_start = next(i for i, l in enumerate(theirs) if "jaxpr={" in l)
  strip = lambda l: re.sub(r"\b[a-z]{1,2}\b(?=:|\s|,|\)|$)", "_", l)
  assert [strip(l) for l in lines[start + 1:start + 6]] == [
      strip(l) for l in theirs[t_start + 1:t_start + 6]]


def chain4_jax(x):
  for _ in range(4):
    x = jax.lax.sin(x)
  return x


COMPARE_WITH_JAX = [
    ("func1", lambda a, b: anp.sum(a + anp.sin(b) * 3.),
     lambda a, b: jnp.sum(a + jnp.sin(b) * 3.), (np.zeros(8, np.float32),) * 2),
    ("lax ops", lambda x, y: lax.reduce_max(lax.transpose(lax.mul(x, y), (1, 0)), (0,)),
     lambda x, y: jax.lax.reduce_max(jax.lax.transpose(jax.lax.mul(x, y), (1, 0)), (0,)),
     (np.ones((2, 3)), np.ones((2, 3)))),
    ("comparison", lambda x: lax.convert_element_type(lax.greater(x, np.float32(0.)), np.float32),
     lambda x: jax.lax.convert_element_type(jax.lax.gt(x, np.float32(0.)), np.float32),
     (np.ones(4, np.float32),)),
    ("broadcast", lambda x: lax.broadcast(x, (2, 3), (0,)),
     lambda x: jax.lax.broadcast_in_dim(x, (2, 3), (1,)), (np.ones(3),)),
    ("reshape+constant", lambda x: lax.add(lax.reshape(x, (3, 2)), np.ones((3, 2))),
     lambda x: jax.lax.add(jax.lax.reshape(x, (3, 2)), np.ones((3, 2))), (np.ones(6),)),
    ("dot_general", lambda x, y: lax.dot_general(x, y, (((1,), (0,)), ((), ()))),
     lambda x, y: jax.lax.dot_general(x, y, (((1,), (0,)), ((), ()))),
     (np.ones((2, 3)), np.ones((3, 4)))),
    ("no equations", lambda x, y: (y, x, y), lambda x, y: (y, x, y), (1.0, np.ones(2))),
]


@pytest.mark.parametrize("name, ours, theirs, args", COMPARE_WITH_JAX,
                         ids=[c[0] for c in COMPARE_WITH_JAX])
def test_printed_like_jax(name, ours, theirs, args):
  _same_structure(adx.make_jaxpr(ours)(*args), jax.make_jaxpr(theirs)(*args))


def test_printed_jit_like_jax_up_to_inner_names():
  # JAX (today) restarts names inside a nested jaxpr; we share one namespace,
  # as JAX used to. Compare the structure with every name made anonymous.
  ours = adx.make_jaxpr(lambda x: lax.cos(adx.jit(lax.sin)(x)))(np.ones(3))
  theirs = jax.make_jaxpr(lambda x: jax.lax.cos(jax.jit(jax.lax.sin)(x)))(np.ones(3))
  name = r"(?<![\w.])(?!in\b|let\b)[a-z]{1,2}\b(?=:|$|,|\))"
  anon = lambda ts: [re.sub(name, "_", t) for t in ts]
  a = [t for t in anon(_tokens(str(ours))) if not t.startswith(("name=", "num_consts="))]
  b = [t for t in anon(_tokens(_normalize_jax(str(theirs)))) if not t.startswith("name=")]
  a = ["jit[" if t == "xla_call[" else t for t in a]
  assert a == b, (str(ours), str(theirs))


def test_html_repr_escapes():
  closed = adx.make_jaxpr(lambda x: lax.sin(x))(1.0)
  assert closed._repr_html_() == '<pre class="jaxpr">' + str(closed).replace(
      "&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") + "</pre>"
