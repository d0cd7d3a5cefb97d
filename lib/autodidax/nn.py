"""A few of jax.nn's functions, written with autodidax.numpy."""
from __future__ import annotations

from . import dtypes
from . import primitives as lax
from . import numpy as anp
from . import util


def logsumexp(x, axis=None, keepdims=False):
  """log(sum(exp(x))) without overflow: the maximum is taken out first. It
  is a constant for differentiation (stop_gradient), and an infinite one is
  replaced by 0, so that inf - inf never makes a NaN."""
  x = anp.astype(x, dtypes.to_inexact(anp.result_type(x)))   # (int32: f32)
  m = anp.max(x, axis, keepdims=True, initial=-anp.inf)   # (-inf if empty)
  m = lax.stop_gradient(anp.where(anp.abs(m) == anp.inf, 0., m))
  out = anp.add(anp.log(anp.sum(anp.exp(anp.subtract(x, m)), axis, keepdims=True)), m)
  return out if keepdims else anp.squeeze(out, axis)   # axis=None: every axis is 1 now


def softmax(x, axis=-1):
  """exp(x) / sum(exp(x)) along `axis`, with the maximum taken out first."""
  m = anp.max(x, axis, keepdims=True, initial=-anp.inf)   # (-inf if empty)
  unnormalized = anp.exp(anp.subtract(x, lax.stop_gradient(m)))
  return anp.divide(unnormalized, anp.sum(unnormalized, axis, keepdims=True))


def log_softmax(x, axis=-1):
  m = anp.max(x, axis, keepdims=True, initial=-anp.inf)   # (-inf if empty)
  shifted = anp.subtract(x, lax.stop_gradient(m))
  return anp.subtract(shifted, anp.log(anp.sum(anp.exp(shifted), axis, keepdims=True)))


def one_hot(x, num_classes: int, *, dtype=None, axis=-1):
  """A new axis of length `num_classes` holding 1 where its index is `x`'s
  value and 0 elsewhere (all 0 for a value outside the classes), as JAX."""
  if anp.result_type(x) == anp.bool_:
    raise TypeError("one_hot: class labels must be integers, got bools")
  hot = anp.equal(anp.expand_dims(x, -1), anp.arange(num_classes))
  return anp.moveaxis(anp.astype(hot, dtype or anp.float64), -1, axis)


def __getattr__(name):
  raise util.not_in_autodidax("jax.nn", name)
