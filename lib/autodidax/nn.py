"""A few of jax.nn's functions, written with autodidax.numpy."""
from __future__ import annotations

from . import lax
from . import numpy as anp


def logsumexp(x, axis=None, keepdims=False):
  """log(sum(exp(x))) without overflow: the maximum is taken out first. It
  is a constant for differentiation (stop_gradient), and an infinite one is
  replaced by 0, so that inf - inf never makes a NaN."""
  m = anp.max(x, axis, keepdims=True)
  m = lax.stop_gradient(anp.where(anp.abs(m) == anp.inf, 0., m))
  out = anp.add(anp.log(anp.sum(anp.exp(anp.subtract(x, m)), axis, keepdims=True)), m)
  return out if keepdims else anp.squeeze(out, axis)   # axis=None: every axis is 1 now


def softmax(x, axis=-1):
  """exp(x) / sum(exp(x)) along `axis`, with the maximum taken out first."""
  unnormalized = anp.exp(anp.subtract(x, lax.stop_gradient(anp.max(x, axis, keepdims=True))))
  return anp.divide(unnormalized, anp.sum(unnormalized, axis, keepdims=True))


def log_softmax(x, axis=-1):
  shifted = anp.subtract(x, lax.stop_gradient(anp.max(x, axis, keepdims=True)))
  return anp.subtract(shifted, anp.log(anp.sum(anp.exp(shifted), axis, keepdims=True)))


def __getattr__(name):
  raise lax.not_in_autodidax("jax.nn", name)
