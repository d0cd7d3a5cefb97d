"""autodidax.viz: pictures of the stack and of boxing, the bind recorder, the stepper."""
import numpy as np
import pytest

import autodidax as adx
import autodidax.numpy as anp
from autodidax import core, viz


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
  assert core.bind_observers == []


def test_stepper_has_one_linked_frame_per_bind():
  ipywidgets = pytest.importorskip("ipywidgets")
  with viz.record() as rec:
    adx.vmap(anp.sin)(np.arange(3.))
  box = rec.stepper()
  _, steps, frames = box.children
  assert isinstance(frames, ipywidgets.Stack) and isinstance(steps, ipywidgets.Select)
  assert len(frames.children) == len(steps.options) == len(rec) > 0
  assert all("<svg" in fr.value for fr in frames.children)
