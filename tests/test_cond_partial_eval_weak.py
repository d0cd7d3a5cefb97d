"""Partial evaluation of a cond whose branches save residuals of different
weak types (a weak Python-float input in one branch, a zero in the other)."""
import numpy as np

import autodidax as adx
import autodidax.numpy as anp
from autodidax import lax
from autodidax import partial_eval as pe
from autodidax.jaxpr import eval_jaxpr


def test_cond_split_with_a_weak_residual_type_checks_and_runs():
  bend = lambda x: lax.cond(x > 0., anp.sin, lambda x: x * x, x)
  closed = adx.make_jaxpr(lambda x, t: adx.jvp(bend, (x,), (t,)))(1., 1.)   # weak inputs
  jaxpr1, jaxpr2, out_unknowns, num_res = pe.partial_eval_jaxpr(closed.jaxpr, [False, True])
  assert out_unknowns == [False, True]
  for x in (1., -2.):
    known_out, *res = eval_jaxpr(jaxpr1, [], x)
    (tangent,) = eval_jaxpr(jaxpr2, [], *res, 1.)
    np.testing.assert_allclose(known_out, np.sin(x) if x > 0 else x * x)
    np.testing.assert_allclose(tangent, np.cos(x) if x > 0 else 2 * x)
