"""Autodidax: a small JAX, built from scratch to show how JAX works inside.

    import autodidax as adx
    import autodidax.numpy as anp

    adx.jvp(anp.sin, (3.,), (1.,))
    adx.vmap(lambda x: x * 2.)(np.arange(3.))
"""
from . import core, tree_util, primitives, ad, batching, numpy, jaxpr, partial_eval  # noqa: F401
from .api import (TransformationError, grad, hessian, jacfwd, jacrev, jvp,  # noqa: F401
                  linearize, make_jaxpr, value_and_grad, vjp, vmap)
from .core import MissingRuleError, Primitive  # noqa: F401
from . import lowering, xla  # noqa: F401  (runtime.py imports jax only when used)
from .xla import Array, block_until_ready, jit  # noqa: F401
from . import control_flow, lax  # noqa: F401  (lax: the primitives and control flow, as jax.lax)
from .flop_count import flops  # noqa: F401
from . import dtypes, nn  # noqa: F401
from . import ad_checkpoint, custom_derivatives  # noqa: F401
from .ad_checkpoint import checkpoint, checkpoint_policies, remat  # noqa: F401
from .custom_derivatives import closure_convert, custom_jvp, custom_vjp  # noqa: F401

# Many devices: collectives over named axes (in lax, as in jax.lax), devices,
# meshes and shardings, shard_map. Nothing here starts the XLA runtime.
from . import mesh, named_sharding, parallel, sharding, sharding_rules, spmd  # noqa: F401
from .sharding import P, device_put, devices, make_mesh, set_mesh  # noqa: F401
from .shard_map import shard_map  # noqa: F401
from .sharding_rules import typeof  # noqa: F401

# Side effects and state: effects in jaxprs, host callbacks, mutable Refs.
from . import effects, callback, debug, state  # noqa: F401
from .state import Ref, new_ref  # noqa: F401
from .callback import ShapeDtypeStruct, pure_callback, io_callback  # noqa: F401
from .util import not_in_autodidax

__all__ = ["jvp", "vmap", "jacfwd", "jacrev", "hessian", "make_jaxpr", "jit", "Array",
           "linearize", "vjp", "grad", "value_and_grad", "lax", "numpy", "nn", "tree_util",
           "Primitive", "closure_convert", "custom_jvp", "custom_vjp", "checkpoint", "remat",
           "checkpoint_policies", "ad_checkpoint", "devices", "make_mesh", "device_put",
           "shard_map", "sharding", "P", "set_mesh", "typeof", "debug", "pure_callback",
           "io_callback", "ShapeDtypeStruct", "new_ref", "Ref", "block_until_ready"]


def __getattr__(name):   # a JAX name that autodidax leaves out: say so
  raise not_in_autodidax("jax", name)
