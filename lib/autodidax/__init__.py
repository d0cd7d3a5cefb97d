"""Autodidax: a small JAX, built from scratch to show how JAX works inside.

    import autodidax as adx
    import autodidax.numpy as anp

    adx.jvp(anp.sin, (3.,), (1.,))
    adx.vmap(lambda x: x * 2.)(np.arange(3.))
"""
from . import core, tree_util, lax, ad, batching, numpy, jaxpr, partial_eval  # noqa: F401
from .api import (TransformationError, grad, hessian, jacfwd, jacrev, jvp,  # noqa: F401
                  linearize, make_jaxpr, value_and_grad, vjp, vmap)
from .core import MissingRuleError, Primitive  # noqa: F401
from . import lowering, xla  # noqa: F401  (runtime.py imports jax only when used)
from .xla import Array, jit  # noqa: F401
from . import control_flow  # noqa: F401  (cond, while, scan: see lax.cond etc.)
from .control_flow import flops  # noqa: F401
from . import dtypes, nn  # noqa: F401

__all__ = ["jvp", "vmap", "jacfwd", "jacrev", "hessian", "make_jaxpr", "jit", "Array",
           "linearize", "vjp", "grad", "value_and_grad", "lax", "numpy", "nn", "tree_util",
           "Primitive"]


def __getattr__(name):
  from .lax import not_in_autodidax
  raise not_in_autodidax("jax", name)
