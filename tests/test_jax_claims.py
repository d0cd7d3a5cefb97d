"""Every claim a chapter makes about JAX is backed by the installed JAX.

The chapters compare the course's library with JAX all the time, and JAX
changes. A sentence about what JAX does or prints is only as good as what
backs it, so each prose block of a chapter (a paragraph, a list, an
admonition) that speaks of JAX must do one of:

1. sit next to a code cell that runs JAX: the nearest code cell before or
   after it in the same section, with at most MAX_GAP prose blocks between,
   calls `jax.` or `jnp.` (or a name the chapter bound to a JAX function,
   such as `jmj`). The cell runs when the book is built, so what it shows is
   the installed JAX's behaviour.
2. cite JAX's source with the role {jaxsrc}`path:name`, which must resolve in
   the installed JAX: the file under jax/_src exists and defines the
   function, class or method (book/_ext/jax_source.py; the build checks the
   same).
3. be marked as no claim at all, with an HTML comment on the line before it:
   `<!-- not a claim about JAX: why -->` (for a word like "JAX's own
   document"); kept rare, and listed by this test's output when it fails.

A bare `jax/_src/...` path in prose is an error too: cite it with the role,
so that it is checked. The next chapter, or the next sentence, is held to
the same rules.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import jax_source  # noqa: E402
import toc  # noqa: E402  (tests/toc.py: _toc.yml's pages)

MAX_GAP = 2
SPEAKS_OF_JAX = re.compile(r"\bJAX\b|\bjax[._/]")
RUNS_JAX = re.compile(r"\b(jax|jnp|jex)\.[A-Za-z_]|\bjmj\(")
NOT_A_CLAIM = re.compile(r"<!--\s*not a claim about JAX:\s*\S.*?-->", re.S)
FENCE = re.compile(r"^(`{3,}|~{3,}|:{3,})\s*(\{([\w-]+)\})?\s*(.*)$")
PROSE_DIRECTIVES = {"admonition", "note", "tip", "warning", "important", "dropdown",
                    "glossary", "hint", "seealso", "attention", "caution"}


def chapters() -> list[Path]:
  """The pages of _toc.yml that are notebooks (they have a kernel)."""
  paths = [ROOT / f"{f}.md" for f in toc.toc_files()]
  return [p for p in paths if p.is_file() and "kernelspec:" in p.read_text().split("\n---", 1)[0]]


class Block:
  def __init__(self, kind, text, line, section, marked=False):
    self.kind, self.text, self.line, self.section, self.marked = kind, text, line, section, marked

  def __repr__(self):
    return f"{self.kind}@{self.line}"


def blocks(text: str) -> list[Block]:
  """A chapter as a list of blocks: 'cell' (a code cell), 'code' (a listing or
  code block), 'prose' (a paragraph, a list, a prose directive), in order,
  each with the number of the section it is in."""
  lines = text.split("\n")
  out: list[Block] = []
  i, section, marked = 0, 0, False
  if lines and lines[0].strip() == "---":   # front matter
    i = lines.index("---", 1) + 1
  para: list[str] = []
  para_line = 0

  def flush():
    nonlocal para, marked
    if para:
      out.append(Block("prose", "\n".join(para), para_line, section, marked))
      marked = False
    para = []

  while i < len(lines):
    line = lines[i]
    m = FENCE.match(line.strip()) if not para or FENCE.match(line.strip()) else None
    if m and line.strip().startswith(("```", "~~~", ":::")):
      flush()
      fence, name = m.group(1), m.group(3)
      body, i0 = [], i
      i += 1
      while i < len(lines) and not (lines[i].strip().startswith(fence[0] * len(fence))
                                    and lines[i].strip().strip(fence[0]) == ""):
        body.append(lines[i])
        i += 1
      i += 1
      content = "\n".join(l for l in body if not re.match(r"\s*:[\w-]+:", l))
      if name == "code-cell":
        out.append(Block("cell", content, i0 + 1, section))
      elif name in PROSE_DIRECTIVES:   # its prose; code nested in it is no claim
        prose = re.sub(r"^(`{3,}|~{3,}).*?^\1\s*$", "", content, flags=re.S | re.M)
        out.append(Block("prose", f"{m.group(4)}\n{prose}", i0 + 1, section, marked))
        marked = False
      else:
        out.append(Block("code", content, i0 + 1, section))
      continue
    stripped = line.strip()
    if stripped.startswith("#") and re.match(r"#+\s", stripped):
      flush()
      section += 1
    elif stripped.startswith("<!--"):
      flush()
      comment = [line]
      while "-->" not in comment[-1] and i + 1 < len(lines):
        i += 1
        comment.append(lines[i])
      marked = bool(NOT_A_CLAIM.search("\n".join(comment)))
    elif stripped in ("", "+++") or stripped.startswith("+++ {"):
      flush()
    else:
      if not para:
        para_line = i + 1
      para.append(line)
    i += 1
  flush()
  return out


def speaks_of_jax(text: str) -> bool:
  text = jax_source.ROLE.sub("", text)
  text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)     # links: their text only
  text = re.sub(r"[*\"“]JAX\s+today[*\"”]", "", text)         # the chapter's title
  return bool(SPEAKS_OF_JAX.search(text))


def backed(bs: list[Block], k: int) -> bool:
  """Whether prose block k has a JAX-running cell next to it."""
  for step in (-1, 1):
    gap, j = 0, k + step
    while 0 <= j < len(bs) and bs[j].section == bs[k].section:
      if bs[j].kind == "cell":
        if RUNS_JAX.search(re.sub(r"#.*", "", bs[j].text)):
          return True
        break
      if bs[j].kind == "prose":
        gap += 1
        if gap > MAX_GAP:
          break
      j += step
  return False


def problems(path: Path) -> list[str]:
  bs = blocks(path.read_text())
  found = []
  for k, b in enumerate(bs):
    if b.kind != "prose":
      continue
    where = f"{path.relative_to(ROOT) if ROOT in path.parents else path.name}:{b.line}"
    for cite in jax_source.ROLE.findall(b.text):
      try:
        jax_source.resolve(cite)
      except (LookupError, ValueError) as e:
        found.append(f"{where}: {{jaxsrc}}`{cite}`: {e}")
    bare = re.search(r"jax/_src/[\w/.]*", jax_source.ROLE.sub("", b.text))
    if bare:
      found.append(f"{where}: cite {bare.group(0)} with {{jaxsrc}}, so that it is checked")
    if speaks_of_jax(b.text) and not b.marked and not jax_source.ROLE.search(b.text) \
        and not backed(bs, k):
      first = " ".join(b.text.split())[:90]
      found.append(f"{where}: a claim about JAX with neither a JAX cell next to it nor a "
                   f"{{jaxsrc}} citation: {first!r}")
  return found


CHAPTERS = chapters()


def test_the_chapters_are_found():
  names = {p.stem for p in CHAPTERS}
  assert {"part1_interpreters", "part4_autodiff", "jax_today", "jaxpr_language"} <= names


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_claim_about_jax_is_backed(path):
  found = problems(path)
  assert not found, "\n".join(found)


def test_markers_are_rare():
  """An opt-out is for a mention that claims nothing; a chapter that needs
  many is avoiding the rule."""
  for path in CHAPTERS:
    n = len(NOT_A_CLAIM.findall(path.read_text()))
    assert n <= 4, f"{path.name}: {n} 'not a claim about JAX' markers"


def test_the_rule_catches_a_new_claim(tmp_path):
  """The checks fail on a made-up chapter: an unbacked claim, a citation of
  a function JAX doesn't have, and a bare path."""
  page = tmp_path / "chapter.md"
  page.write_text(
      "---\nkernelspec:\n  name: python3\n---\n\n# A chapter\n\n"
      "JAX prints a `linear` parameter for scan.\n\n"
      "JAX linearizes in {jaxsrc}`interpreters/ad.py:NoSuchTrace`.\n\n"
      "See jax/_src/core.py for the rest.\n\n"
      "JAX keeps a `jit` equation:\n\n"
      "```{code-cell} ipython3\nprint(jax.make_jaxpr(jax.jit(f))(1.))\n```\n\n"
      "<!-- not a claim about JAX: a title -->\nJAX's own document.\n")
  found = problems(page)
  assert any("linear" in f for f in found), found
  assert any("NoSuchTrace" in f for f in found), found
  assert any("bare" in f or "cite jax/_src/core.py" in f for f in found), found
  assert not any("keeps a" in f for f in found), found
  assert not any("own document" in f for f in found), found
  assert len(found) == 3, found


def _rendered(markdown_line: str) -> str:
  """A line of prose with {jaxsrc} roles, rendered as the book renders it."""
  from docutils import nodes
  para = nodes.paragraph()
  for i, piece in enumerate(re.split(r"(\{jaxsrc\}`[^`]+`|`[^`]+`)", markdown_line)):
    if piece.startswith("{jaxsrc}"):
      made, _ = jax_source.jaxsrc_role("jaxsrc", piece, piece[9:-1], 0, None)
      para += made
    elif piece.startswith("`"):
      para += nodes.literal(piece, piece[1:-1])
    elif piece:
      para += nodes.Text(piece)
  doc = nodes.document(None, None)
  doc += para
  jax_source._no_doubled_names(None, doc)
  return para.astext()


@pytest.mark.parametrize("line, shown", [
    ("`jit` is {jaxsrc}`api.py:jit`.", "jit is jax/_src/api.py."),
    ("`jax.checkpoint` ({jaxsrc}`ad_checkpoint.py:checkpoint`)",
     "jax.checkpoint (jax/_src/ad_checkpoint.py)"),
    ("`jax.lax` ({jaxsrc}`lax/lax.py:dot_general`)",
     "jax.lax (dot_general in jax/_src/lax/lax.py)"),
    ("`SymbolicZero`, made far earlier in the text, {jaxsrc}`ad_util.py:SymbolicZero`",
     "SymbolicZero, made far earlier in the text, SymbolicZero in jax/_src/ad_util.py"),
])
def test_a_cited_name_never_reads_twice(line, shown):
  assert _rendered(line) == shown


def test_no_chapter_doubles_a_cited_name():
  """No chapter's citation, rendered, repeats the name just before it."""
  doubled = []
  for path in CHAPTERS:
    for line in path.read_text().splitlines():
      if "{jaxsrc}" in line:
        text = _rendered(line)
        doubled += [f"{path.name}: {text}" for m in re.finditer(r"(\w+)\W{1,12}\1 in jax/_src",
                                                                text)]
  assert not doubled, doubled


# --- The sentences fixed in the third review, each checked where it is made ---------------------

def _says(chapter: str, phrase: str) -> bool:
  """Whether the chapter's prose contains `phrase` (line breaks as spaces)."""
  text = re.sub(r"\s+", " ", (ROOT / "book" / f"{chapter}.md").read_text())
  return re.sub(r"\s+", " ", phrase) in text


def _jax64():
  import jax
  jax.config.update("jax_enable_x64", True)
  return jax


def test_remat_names_jaxs_primitive_and_dots_saveable_as_jax_has_them():
  from jax._src import ad_checkpoint as jac
  from jax._src.lax import convolution, lax as jlax
  assert _says("remat", "{jaxsrc}`remat_p <ad_checkpoint.py:remat_p>`, which prints as `remat2`")
  assert jac.remat_p.name == "remat2"
  assert _says("remat", "also saves convolutions (`conv_general_dilated`) and cuDNN's scaled "
                        "matrix products (`scaled_matmul_wrapper`)")
  wrapper = type("P", (), {"name": "scaled_matmul_wrapper"})()
  assert jac.dots_saveable(convolution.conv_general_dilated_p)
  assert jac.dots_saveable(wrapper) and jac.dots_saveable(jlax.dot_general_p)
  assert not jac.dots_saveable(jlax.sin_p)


def test_remat_says_when_the_barrier_is_emitted():
  jax = _jax64()
  assert _says("remat", "with `prevent_cse=True`, the default")
  assert _says("remat", "puts only the `True` ones through the barrier")

  def barrier_operands(**kw):
    f = jax.checkpoint(lambda x, y: jax.numpy.sin(x) * jax.numpy.cos(y), **kw)
    text = jax.jit(jax.grad(f)).lower(0.5, 0.25).as_text()
    return [l.count("%") - 1 for l in text.splitlines() if "optimization_barrier" in l]
  assert barrier_operands() and barrier_operands(prevent_cse=False) == []
  both, one = barrier_operands()[0], barrier_operands(prevent_cse=(True, False))[0]
  assert one < both
  # and not in the forward pass: no barrier without differentiation
  f = jax.checkpoint(lambda x: jax.numpy.sin(x))
  assert "optimization_barrier" not in jax.jit(f).lower(0.5).as_text()


def test_remat_explains_its_fastest_cpu_row_from_the_measurements():
  import json
  assert _says("remat", "The fastest CPU row, every √N layers at N = 64")
  rows = json.loads((ROOT / "benchmarks/results.json").read_text())["sections"]["remat"]["rows"]
  cpu = [r for r in rows if r["platform"] == "cpu" and r.get("ours_ms")]
  fastest = min(cpu, key=lambda r: r["ours_ms"] / r["layers"] if r["layers"] == 64 else 1e9)
  assert (fastest["layers"], fastest["mode"]) == (64, "every √N layers")
  for lib in ("ours", "jax"):   # two groups of repeats, about 150 and about 275 ms
    times = sorted(fastest["timings"][lib]["repeats_us"])
    assert times[0] < 170e3 and times[-1] > 250e3, times
  gpu_host = json.loads((ROOT / "benchmarks/gpu/results.json").read_text())
  cpu64 = [r for r in gpu_host["sections"]["remat"]["rows"]
           if r["platform"] == "cpu" and r["layers"] == 64]
  assert max(cpu64, key=lambda r: r["ours_ms"])["mode"] == "every √N layers"


def test_remat_names_the_hook_part1_uses():
  import inspect
  from autodidax import viz
  assert _says("remat", "a bind observer (`core.observe_binds`, the hook behind Part 1's "
                        "`viz.record`)")
  assert "observe_binds" in inspect.getsource(viz.record)
  assert "viz.record()" in (ROOT / "book/part1_interpreters.md").read_text()


def test_custom_derivatives_stepper_paragraph_counts_the_steps():
  import numpy as np
  import autodidax as adx
  import autodidax.numpy as anp
  from autodidax import viz
  assert _says("custom_derivatives", "Fourteen of the 24 steps stage rather than compute.")

  @adx.custom_jvp
  def safe_length(v):
    return anp.sqrt(anp.sum(v * v))

  @safe_length.defjvp
  def _(primals, tangents):
    (v,), (v_dot,) = primals, tangents
    n = safe_length(v)
    return n, anp.sum(v / anp.where(n > 0., n, 1.) * v_dot)

  anp._where_jit.clear_cache()   # where's own jit traces afresh, as in the chapter's kernel
  with viz.record() as rec:   # (after an earlier test's where, its cache skips 2 steps)
    adx.jvp(safe_length, (np.array([3., 4.]),), (np.array([1., 0.]),))
  levels = [e.main.level for e in rec.events]
  assert len(levels) == 24 and sum(l >= 2 for l in levels) == 14
  assert levels[:3] == [2] * 3 and levels[3] == 1 and set(levels[4:15]) == {2, 3}
  assert levels[15:] == [0] * 9
  assert [e.prim.name for e in rec.events].count("xla_call") == 2   # where's own jit


def test_custom_derivatives_softplus_and_answer_3_hold_in_jax():
  jax = _jax64()
  jnp = jax.numpy
  assert _says("custom_derivatives", "the naive program's gradient is nan at 800, the stable "
                                     "program's is 0 at 0, and the rule's is right at all three")
  naive = lambda x: jnp.log(1. + jnp.exp(x))
  stable = lambda x: jnp.maximum(x, 0.) + jnp.log(1. + jnp.exp(-jnp.abs(x)))
  assert jnp.isnan(jax.grad(naive)(800.)) and jax.grad(stable)(0.) == 0.
  assert _says("custom_derivatives", "`jacrev(jacrev(g))` is reverse mode twice")

  @jax.custom_vjp
  def g(x):
    return jnp.sin(x)
  g.defvjp(lambda x: (g(x), jnp.cos(x)), lambda c, t: (c * t,))
  assert jnp.isclose(jax.jacrev(jax.jacrev(g))(1.), -jnp.sin(1.))
  with pytest.raises(TypeError, match="forward-mode"):
    jax.hessian(g)(1.)


def test_custom_derivatives_describes_jaxs_closure_convert():
  jax = _jax64()
  from jax._src import custom_derivatives as jcd
  assert _says("custom_derivatives", "hoists only the closed-over values that may carry a "
                                     "tangent, and caches its tracing")
  assert hasattr(jcd._closure_convert_for_avals, "cache_clear")
  c = jax.numpy.array(2.)   # a concrete value: no tangent, not hoisted
  _, hoisted = jax.closure_convert(lambda x: c * x, 1.)
  assert hoisted == []
  seen = []
  jax.grad(lambda c: seen.append(jax.closure_convert(lambda x: c * x, 1.)[1]) or c)(2.)
  assert len(seen[0]) == 1
