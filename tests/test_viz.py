"""autodidax.viz: pictures of the stack and of boxing, the bind recorder, the stepper."""
import numpy as np
import pytest

import autodidax as adx
import autodidax.numpy as anp
from autodidax import core, viz
from autodidax.viz.draw import clip


def _svg(graph) -> str:
  return graph.pipe(format="svg").decode()


def test_stack_graph_draws_every_level_and_the_active_one():
  seen = {}

  def f(x):
    seen["stack"] = tuple(core.trace_stack)
    return x * 2.

  adx.vmap(lambda x: adx.jvp(f, (x,), (1.,)))(np.arange(3.))
  stack = seen["stack"]
  svg = _svg(viz.stack_graph(stack, active=stack[1]))
  for label in ("level 0", "EvalTrace", "level 1", "BatchTrace", "axis_size=3",
                "level 2", "JVPTrace", "handles this bind"):
    assert label in svg, label
  assert _svg(viz.stack_graph(stack)).count("handles this bind") == 0


def test_peek_captures_stack_and_boxing_from_inside():
  def f(x):
    return viz.peek(anp.sin(x), "inside") * 2.

  with viz.capture() as snaps:
    out = adx.vmap(lambda x: adx.jvp(f, (x,), (1.,)))(np.arange(3.))
  assert np.allclose(out[0], 2 * np.sin(np.arange(3.)))   # peek returns its input
  (snap,) = snaps
  assert [m.trace_type.__name__ for m in snap.stack] == ["EvalTrace", "BatchTrace", "JVPTrace"]
  assert type(snap.value).__name__ == "JVPTracer"
  assert type(snap.value.primal).__name__ == "BatchTracer"
  svg = _svg(snap.graph())
  assert "JVPTracer" in svg and "BatchTracer" in svg and "batch_dim" in svg
  assert "image/svg+xml" in snap._repr_mimebundle_()


def test_peek_outside_capture_is_a_no_op():
  assert viz.peek(3.0) == 3.0


def test_record_sees_binds_in_order_with_nesting():
  with viz.record() as rec:
    adx.jvp(anp.sin, (3.,), (1.,))
  got = [(e.prim.name, e.main.trace_type.__name__, e.depth) for e in rec.events]
  # sin's JVP rule binds sin on the primal, then mul(tangent, cos(primal)).
  assert got == [("sin", "JVPTrace", 0), ("sin", "EvalTrace", 1),
                 ("cos", "EvalTrace", 1), ("mul", "EvalTrace", 1)]
  assert all(e.outs is not None for e in rec.events)
  assert "sin" in repr(rec)


def test_record_restores_observers_after_an_error():
  with pytest.raises(ZeroDivisionError):
    with viz.record():
      anp.sin(1.0)
      1 / 0
  assert core.hooks.observers == []


def test_stepper_has_one_linked_frame_per_bind():
  ipywidgets = pytest.importorskip("ipywidgets")
  with viz.record() as rec:
    adx.vmap(anp.sin)(np.arange(3.))
  box = rec.stepper()
  _, steps, frames = box.children
  assert isinstance(frames, ipywidgets.Stack) and isinstance(steps, ipywidgets.Select)
  assert len(frames.children) == len(steps.options) == len(rec) > 0
  assert all("<svg" in fr.value for fr in frames.children)


# -- Pictures that fit any screen and say what they show -----------------------------

def test_every_picture_says_what_it_shows():
  """Each graph's name (the SVG's <title>, the book's alt text) names what is drawn."""
  from autodidax import lax
  seen = {}

  def f(x):
    seen["stack"] = tuple(core.trace_stack)
    return viz.peek(anp.sin(x) * 2., "inside")

  with viz.capture() as snaps:
    adx.vmap(lambda x: adx.jvp(f, (x,), (1.,)))(np.arange(3.))
  snap_alt = snaps[0].graph().name
  for words in ("inside", "level 2 JVPTrace", "level 1 BatchTrace", "JVPTracer (level 2)"):
    assert words in snap_alt, (words, snap_alt)
  jaxpr = adx.make_jaxpr(lambda a, b: anp.sin(b) * 3. + a)(np.zeros(3), np.ones(3))
  graph = viz.jaxpr_graph(jaxpr)
  assert graph.name == ("A jaxpr's dataflow graph: inputs a:f64[3], b:f64[3]; 3 equations "
                        "(sin, mul, add); outputs e:f64[3]")
  assert "<title>A jaxpr&#39;s dataflow graph" in _svg(graph) or \
      "<title>A jaxpr's dataflow graph" in _svg(graph)
  # The names in the alt text are the ones drawn in the nodes.
  assert "e:f64[3]" in _svg(graph)
  assert "missing" in viz.rules_graph(core.Primitive("nothing_yet")).name
  assert "sin" in viz.rules_graph(lax.sin_p).name


def test_inline_pictures_shrink_to_fit_and_have_an_accessible_name():
  jaxpr = adx.make_jaxpr(lambda x: anp.sin(x))(np.ones(2))
  html = viz.svg_html(viz.jaxpr_graph(jaxpr))
  assert html.startswith('<div class="adx-fit">')
  assert 'role="img" aria-label="A jaxpr&#x27;s dataflow graph' in html
  assert "max-width:100%;height:auto" in html
  # Panes wrap: side by side while there is room.
  assert "flex-wrap:wrap" in viz.side_by_side("a", "b")._repr_html_()


def test_labels_are_cut_at_a_word_with_an_ellipsis():
  long = ", ".join(f"param{i}=value{i}" for i in range(12))
  cut = clip(long, 60)
  assert len(cut) <= 60 and cut.endswith("…")
  assert long.startswith(cut[:-1]) and cut[-2] not in ", "
  assert long[len(cut) - 1] in ", "   # cut at a separator, not inside a word
  assert clip("short", 60) == "short"


def test_staging_levels_show_their_builder_not_a_raw_repr():
  seen = {}

  def f(x):
    seen["stack"] = tuple(core.trace_stack)
    return x + 1.

  adx.make_jaxpr(f)(1.)
  svg = _svg(viz.stack_graph(seen["stack"]))
  assert "object at 0x" not in svg and "&lt;autodidax" not in svg
  assert "JaxprBuilder: " in svg and "equations so far" in svg


def test_every_trace_colour_names_a_trace_of_the_library():
  from autodidax import core, stackless, viz  # noqa: F401  (stackless defines traces too)

  def subclasses(c):
    return {c.__name__} | {n for s in c.__subclasses__() for n in subclasses(s)}
  traces = subclasses(core.Trace) | subclasses(stackless.Trace)
  assert set(viz.TRACE_COLORS) <= traces, set(viz.TRACE_COLORS) - traces


def test_a_wide_flat_jaxpr_gets_a_row_per_equation_on_a_phone():
  """vmap of a cond with a batched predicate is flat: branches side by side,
  joined by select_n. Split, it is as wide as before; for a phone it gets one
  equation per row, narrow enough for a phone's pane, and keeps every node."""
  from autodidax import lax
  from autodidax.viz.draw import NARROW_COLUMN_PX, natural_width
  f = lambda x: lax.cond(anp.sum(x) > 0., anp.sin, lambda x: x * 2., x)
  jaxpr = adx.make_jaxpr(adx.vmap(f))(np.stack([np.ones(3), -np.ones(3)]))
  flat = viz.jaxpr_graph_nested(jaxpr, split=True)
  assert len(flat.pictures) == 1 and natural_width(flat.pictures[0]) > NARROW_COLUMN_PX
  picture = viz.jaxpr_picture(jaxpr)
  assert isinstance(picture, viz.ByWidth)
  [narrow] = picture.narrow.pictures
  assert natural_width(narrow) <= NARROW_COLUMN_PX
  assert _svg(narrow).count('class="node"') == _svg(flat.pictures[0]).count('class="node"')


def test_nested_jaxprs_are_split_for_a_phone():
  """viz.jaxpr_picture: the nest on a wide page, one picture per jaxpr on a
  phone, each narrow enough that its smallest label measures 8 px in a
  phone's 344 px frame; names are shared, as in the printed jaxpr."""
  import re
  from autodidax import lax
  from autodidax.viz.draw import WIDE_COLUMN_PX, natural_width

  def label_px(graph):
    return min(float(f) for f in re.findall(r'font-size="([0-9.]+)"', _svg(graph))) * 4 / 3

  f = lambda x: anp.sum(lax.switch(1, [anp.sin, anp.cos, anp.tanh], x))
  jaxpr = adx.make_jaxpr(adx.grad(f))(np.ones(3))
  split = viz.jaxpr_graph_nested(jaxpr, split=True)
  assert len(split.pictures) == 1 + 2 * 3   # the outer jaxpr, two switches of 3 branches
  for g in split.pictures:
    assert natural_width(g) * 8 / label_px(g) <= 344, g.name
  assert "branches[2] of the cond" in split.pictures[-1].name
  nested = viz.jaxpr_graph_nested(jaxpr)
  assert natural_width(nested) > 344 * label_px(nested) / 8   # the nest would not fit
  picture = viz.jaxpr_picture(jaxpr)
  assert isinstance(picture, viz.Stacked) == (natural_width(nested) > WIDE_COLUMN_PX)
  small = viz.jaxpr_picture(adx.make_jaxpr(lambda x: lax.cond(x > 0., anp.sin, anp.cos, x))(1.))
  html = small._repr_html_()
  assert isinstance(small, viz.ByWidth)
  assert html.count('class="adx-wide-only"') == html.count('class="adx-narrow-only"') == 1
  assert "@media (max-width:" in html and html.count("<svg") == 1 + 3
