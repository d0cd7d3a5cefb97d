"""The core: the interpreter stack, boxing and unboxing (full_raise, full_lower,
lift), abstract values, and the rule tables."""
import numpy as np
import pytest

import autodidax as adx
import autodidax.numpy as anp
from autodidax import ad, batching, core, lax
from autodidax.ad import JVPTrace, JVPTracer, Zero
from autodidax.batching import BatchTrace, BatchTracer, not_mapped
from autodidax.core import (ConcreteArray, EvalTrace, EscapedTracerError, MissingRuleError,
                            Primitive, RuleTable, ShapedArray, new_main, trace_stack)


# --- The interpreter stack ------------------------------------------------------------

def test_bottom_of_the_stack_is_eval():
  assert len(trace_stack) == 1
  assert trace_stack[0].level == 0 and trace_stack[0].trace_type is EvalTrace
  assert core.find_top_trace([1.0, np.ones(2)]).main is trace_stack[0]


def test_new_main_levels_nest_and_unwind():
  with new_main(JVPTrace) as m1:
    assert m1.level == 1 and trace_stack[-1] is m1
    with new_main(BatchTrace, 5) as m2:
      assert m2.level == 2 and m2.global_data == 5
      assert [m.level for m in trace_stack] == [0, 1, 2]
    assert trace_stack[-1] is m1 and len(trace_stack) == 2
  assert len(trace_stack) == 1


def test_new_main_restores_the_stack_on_exceptions():
  with pytest.raises(ZeroDivisionError):
    with new_main(JVPTrace):
      with new_main(BatchTrace, 3):
        1 / 0
  assert len(trace_stack) == 1
  # A transformation whose function raises leaves nothing behind either.
  with pytest.raises(ZeroDivisionError):
    adx.vmap(lambda x: adx.jvp(lambda y: 1 / 0, (x,), (x,)))(np.ones(2))
  assert len(trace_stack) == 1


def test_new_dynamic_restores_on_exceptions():
  with new_main(JVPTrace) as main:
    with pytest.raises(KeyError):
      with core.new_dynamic(main):
        assert core.dynamic_trace is main
        raise KeyError
    assert core.dynamic_trace is None


class RecordingTracer(core.Tracer):
  __slots__ = ["val"]

  def __init__(self, trace, val):
    self._trace, self.val = trace, val

  aval = property(lambda self: core.get_aval(self.val))


class RecordingTrace(core.Trace):
  """Evaluates, writing down each primitive it sees in `main.global_data`."""
  def pure(self, val):
    return RecordingTracer(self, val)
  lift = pure

  def process_primitive(self, primitive, tracers, params):
    self.main.global_data.append(primitive.name)
    out = core.impl_rules[primitive](*[t.val for t in tracers], **params)
    return [RecordingTracer(self, out)]


def test_dynamic_trace_sees_every_bind():
  with new_main(RecordingTrace, []) as main:
    assert lax.sin(1.0) == np.sin(1.0)          # not dynamic: evaluated eagerly
    with core.new_dynamic(main):
      out = lax.cos(lax.sin(1.0))               # no tracer among the arguments
    assert isinstance(out, RecordingTracer) and out.val == np.cos(np.sin(1.0))
    assert main.global_data == ["sin", "cos"]
    with core.new_dynamic(main):
      # jvp sits above the dynamic interpreter: it handles its tracers, and the
      # binds its rules make on plain values go down to the dynamic one.
      y, t = adx.jvp(lambda x: lax.sin(x), (1.0,), (1.0,))
    assert isinstance(y, RecordingTracer) and isinstance(t, RecordingTracer)
    assert np.allclose([y.val, t.val], [np.sin(1.0), np.cos(1.0)])
    assert sorted(main.global_data[2:]) == ["cos", "mul", "sin"]


def test_main_traces_are_distinct_objects():
  with new_main(JVPTrace) as a:
    pass
  with new_main(JVPTrace) as b:
    assert a.level == b.level and a is not b
    assert a != b and a not in trace_stack and b in trace_stack


def test_find_top_trace_picks_the_highest_level():
  with new_main(JVPTrace) as m1, new_main(BatchTrace, 2) as m2:
    t1 = JVPTracer(JVPTrace(m1), 1.0, 1.0)
    t2 = BatchTracer(BatchTrace(m2), np.ones(2), 0)
    for args in ([t1, t2], [t2, t1], [1.0, t2, t1]):
      assert core.find_top_trace(args).main is m2
    assert core.find_top_trace([t1, 2.0]).main is m1
    assert core.find_top_trace([2.0]).main is trace_stack[0]


# --- full_raise, lift, full_lower -------------------------------------------------------

def test_full_raise_boxes_constants_with_pure():
  with new_main(JVPTrace) as main:
    trace = JVPTrace(main)
    t = core.full_raise(trace, 3.0)
    assert isinstance(t, JVPTracer) and t.primal == 3.0 and type(t.tangent) is Zero
    assert (t.tangent.aval.shape, t.tangent.aval.dtype) == ((), np.float64)
    with pytest.raises(core.UnsupportedTypeError, match="type str"):
      core.full_raise(trace, "3")


def test_full_raise_returns_own_tracers_and_lifts_lower_ones():
  with new_main(JVPTrace) as m1, new_main(BatchTrace, 4) as m2:
    low = JVPTracer(JVPTrace(m1), np.ones(3), np.ones(3))
    high_trace = BatchTrace(m2)
    lifted = core.full_raise(high_trace, low)
    assert isinstance(lifted, BatchTracer) and lifted.val is low
    assert lifted.batch_dim is not_mapped
    assert core.full_raise(high_trace, lifted) is lifted
    assert core.full_raise(JVPTrace(m1), low) is low   # a fresh Trace of the same main


def test_full_raise_refuses_to_lower():
  with new_main(JVPTrace) as m1, new_main(BatchTrace, 4) as m2:
    high = BatchTracer(BatchTrace(m2), np.ones((4, 3)), 0)
    with pytest.raises(EscapedTracerError, match="leaked into an outer"):
      core.full_raise(JVPTrace(m1), high)


def test_full_lower():
  with new_main(JVPTrace) as m1, new_main(BatchTrace, 4) as m2:
    zero_t = JVPTracer(JVPTrace(m1), np.ones(3), Zero(ShapedArray((3,), np.float64)))
    assert core.full_lower(zero_t) is zero_t.primal
    live = JVPTracer(JVPTrace(m1), np.ones(3), np.ones(3))
    assert core.full_lower(live) is live
    unmapped = BatchTracer(BatchTrace(m2), live, not_mapped)
    assert core.full_lower(unmapped) is live          # lowers one level, stops
    nested = BatchTracer(BatchTrace(m2), zero_t, not_mapped)
    assert core.full_lower(nested) is zero_t.primal   # all the way down
    mapped = BatchTracer(BatchTrace(m2), np.ones((4, 3)), 0)
    assert core.full_lower(mapped) is mapped
  assert core.full_lower(2.0) == 2.0


def test_bind_lowers_outputs():
  # Zero tangents in, so the output is unboxed to a plain value.
  out = adx.jvp(lambda x: lax.sin(2.0), (1.0,), (1.0,))
  assert not isinstance(out[0], core.Tracer)
  seen = []
  adx.jvp(lambda x: seen.append(lax.mul(x, 0.0) is not None and lax.cos(3.0)), (1.0,), (1.0,))
  assert not isinstance(seen[0], core.Tracer)


def test_tracers_inside_jvp_see_concrete_values_and_in_vmap_shaped():
  avals = []
  adx.jvp(lambda x: avals.append(x.aval) or x, (np.arange(3.0),), (np.ones(3),))
  adx.vmap(lambda x: avals.append(x.aval) or x, in_axes=1)(np.ones((2, 5, 4)))
  assert type(avals[0]) is ConcreteArray and np.array_equal(avals[0].val, np.arange(3.0))
  assert type(avals[1]) is ShapedArray and avals[1] == ShapedArray((2, 4), np.float64)


@pytest.mark.parametrize("bdim", [0, 1, 2])
def test_batch_tracer_aval_drops_the_batch_axis(bdim):
  with new_main(BatchTrace, 7) as main:
    shape = [2, 3]
    shape.insert(bdim, 7)
    t = BatchTracer(BatchTrace(main), np.zeros(shape, np.float32), bdim)
    assert t.aval == ShapedArray((2, 3), np.float32)
    assert (t.shape, t.ndim, t.size, t.dtype) == ((2, 3), 2, 6, np.float32)
    assert len(t) == 2


# --- Abstract values --------------------------------------------------------------------

@pytest.mark.parametrize("val, shape, dtype", [
    (1.0, (), np.float64), (1, (), np.int64), (True, (), np.bool_),
    (np.float32(1), (), np.float32), (np.ones((2, 3), np.int32), (2, 3), np.int32),
])
def test_get_aval_of_constants_is_concrete(val, shape, dtype):
  aval = core.get_aval(val)
  assert type(aval) is ConcreteArray and aval.val is val
  assert aval.shape == shape and aval.dtype == dtype


def test_concrete_and_shaped_arrays():
  c = ConcreteArray(np.ones((2, 3)))
  s = ShapedArray((2, 3), np.float64)
  assert c == s and hash(c) == hash(s)
  assert s != ShapedArray((3, 2), np.float64) and s != ShapedArray((2, 3), np.float32)
  assert type(core.raise_to_shaped(c)) is ShapedArray and core.raise_to_shaped(c) == s
  assert s.str_short() == "f64[2,3]" and ShapedArray((), np.int32).str_short() == "i32[]"
  assert (s.ndim, s.size) == (2, 6)
  assert s.update(dtype=np.float32) == ShapedArray((2, 3), np.float32)
  assert s.update(shape=(6,)) == ShapedArray((6,), np.float64)
  assert bool(ConcreteArray(np.float64(2.0))._bool(None))
  assert "ConcreteArray(f64[2,3]" in repr(c)


def test_shaped_tracer_refuses_bool_concrete_tracer_allows_it():
  assert adx.jvp(lambda x: 1.0 if x > 0 else -1.0, (2.0,), (1.0,)) == (1.0, 0.0)
  with pytest.raises(core.ConcretizationError, match="BatchTrace"):
    adx.vmap(lambda x: 1.0 if x > 0 else -1.0)(np.ones(3))


def test_unsupported_types():
  assert not core.is_array("x") and not core.is_array([1.0])
  assert core.is_array(np.float32(1)) and core.is_array(np.ones(2))
  with pytest.raises(core.UnsupportedTypeError):
    core.get_aval(object())


def test_dtype_short():
  assert [core.dtype_short(d) for d in (np.float32, np.float64, np.int32, np.bool_)] == [
      "f32", "f64", "i32", "bool"]


# --- Primitives and rule tables -----------------------------------------------------------

def test_missing_rule_error():
  table = RuleTable("Frobnication", "Register one somehow.")
  p = Primitive("spam")
  with pytest.raises(MissingRuleError, match=r"^Frobnication rule for 'spam' not "
                     r"implemented\. Register one somehow\.$"):
    table[p]
  assert issubclass(MissingRuleError, NotImplementedError)
  assert "spam" not in repr(table)
  table[p] = None
  assert "spam" in repr(table)


def test_override_replaces_and_restores():
  before = core.impl_rules[lax.sin_p]
  with core.impl_rules.override(lax.sin_p, lambda x: 42.0) as rule:
    assert rule(0) == 42.0
    assert lax.sin(1.0) == 42.0
  assert core.impl_rules[lax.sin_p] is before
  np.testing.assert_allclose(lax.sin(1.0), np.sin(1.0))


def test_override_restores_when_the_block_raises():
  before = ad.jvp_rules[lax.cos_p]
  with pytest.raises(RuntimeError):
    with ad.jvp_rules.override(lax.cos_p, lambda p, t: (0.0, 0.0)):
      raise RuntimeError
  assert ad.jvp_rules[lax.cos_p] is before


def test_override_of_a_missing_rule_removes_it_again():
  p = Primitive("fresh")
  for table in (core.impl_rules, ad.jvp_rules, batching.vmap_rules):
    assert p not in table
    with pytest.raises(ValueError):
      with table.override(p, lambda *a, **k: None):
        assert p in table
        raise ValueError
    assert p not in table
    with pytest.raises(MissingRuleError):
      table[p]


def test_nested_overrides_unwind_in_order():
  original = core.impl_rules[lax.exp_p]
  with core.impl_rules.override(lax.exp_p, lambda x: 1.0):
    with core.impl_rules.override(lax.exp_p, lambda x: 2.0):
      assert lax.exp(0.0) == 2.0
    assert lax.exp(0.0) == 1.0
  assert core.impl_rules[lax.exp_p] is original


def test_user_primitive_with_all_rules():
  cube_p = Primitive("cube")
  impl = lambda x: np.asarray(x) ** 3

  def cube_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return cube_p.bind(x), lax.mul(lax.mul(3.0, lax.mul(x, x)), t)

  def cube_vmap(axis_size, vals_in, dims_in):
    return cube_p.bind(vals_in[0]), dims_in[0]

  with core.impl_rules.override(cube_p, impl), ad.jvp_rules.override(cube_p, cube_jvp), \
       batching.vmap_rules.override(cube_p, cube_vmap):
    y, t = adx.jvp(lambda x: cube_p.bind(x), (2.0,), (1.0,))
    assert (y, t) == (8.0, 12.0)
    np.testing.assert_allclose(adx.vmap(cube_p.bind, in_axes=1)(np.ones((2, 3)) * 2), np.full((3, 2), 8.0))
    np.testing.assert_allclose(adx.jacfwd(lambda x: cube_p.bind(x))(np.arange(3.0)),
                               np.diag(3 * np.arange(3.0) ** 2))
  assert cube_p not in core.impl_rules


def test_def_impl_registers_and_multiple_results():
  split_p = Primitive("split2", multiple_results=True)
  try:
    split_p.def_impl(lambda x: [x, x * 2])
    assert split_p.bind(3.0) == [3.0, 6.0]
    assert repr(split_p) == "split2"
  finally:
    del core.impl_rules[split_p]
  abs_p = Primitive("abs_eval_only")
  try:
    rule = abs_p.def_abstract_eval(lambda x: x)
    assert core.abstract_eval_rules[abs_p] is rule
  finally:
    del core.abstract_eval_rules[abs_p]


# --- Escaped tracers --------------------------------------------------------------------

def test_check_live():
  with new_main(JVPTrace) as main:
    core.check_live(main)
  with pytest.raises(EscapedTracerError, match="already finished"):
    core.check_live(main)


def test_finished_trace_is_marked_in_reprs():
  leaked = []
  adx.jvp(lambda x: leaked.append(x) or x, (1.0,), (1.0,))
  assert "finished" in repr(leaked[0])
  with new_main(JVPTrace) as main:
    assert "finished" not in repr(JVPTrace(main))
