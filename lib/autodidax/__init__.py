"""Autodidax: a small JAX, built from scratch to show how JAX works inside.

    import autodidax as adx
    import autodidax.numpy as anp

    adx.jvp(anp.sin, (3.,), (1.,))
    adx.vmap(lambda x: x * 2.)(np.arange(3.))
"""
from . import core, tree_util, lax, ad, batching, numpy  # noqa: F401  (order matters)
from .api import jacfwd, jvp, vmap, TransformationError  # noqa: F401
from .core import MissingRuleError, Primitive  # noqa: F401

__all__ = ["jvp", "vmap", "jacfwd", "lax", "numpy", "tree_util", "Primitive"]
