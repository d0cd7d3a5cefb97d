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
from .xla import Array, block_until_ready, jit  # noqa: F401
from . import control_flow  # noqa: F401
from .flop_count import flops  # noqa: F401

# Like `jax.lax`, `autodidax.lax` is where users find control flow too. It is
# written in control_flow, which builds on lax, so lax gets it from here.
for _name in ("cond", "switch", "while_loop", "fori_loop", "scan", "select_n", "clamp"):
  setattr(lax, _name, getattr(control_flow, _name))

from . import dtypes, nn  # noqa: F401,E402
from . import ad_checkpoint, custom_derivatives  # noqa: E402
from .ad_checkpoint import checkpoint, checkpoint_policies, remat  # noqa: E402,F401
from .custom_derivatives import closure_convert, custom_jvp, custom_vjp  # noqa: E402,F401

# Many devices: collectives over named axes (in lax, as in jax.lax), devices,
# meshes and shardings, shard_map. Nothing here starts the XLA runtime.
from . import parallel, sharding, spmd  # noqa: E402
from .sharding import P, device_put, devices, make_mesh, set_mesh  # noqa: E402,F401
from .shard_map import shard_map  # noqa: E402,F401
from . import sharding_rules  # noqa: E402
from .sharding_rules import typeof  # noqa: E402,F401
sharding_rules.keep_body_types(control_flow.cond_p, control_flow.while_p, control_flow.scan_p,
                               xla.xla_call_p, custom_derivatives.custom_jvp_call_p,
                               custom_derivatives.custom_vjp_call_p,
                               custom_derivatives.custom_lin_p, ad_checkpoint.remat_p)
for _p in (control_flow.select_n_p, control_flow.clamp_p):
  core.sharding_rules[_p] = sharding_rules.elementwise_rule(_p)
core.sharding_rules[ad_checkpoint.name_p] = sharding_rules.same_as_operand
for _name in ("psum", "pmean", "pmax", "pmin", "all_gather", "psum_scatter", "ppermute",
              "axis_index"):
  setattr(lax, _name, getattr(parallel, _name))
from .shard_map import pcast  # noqa: E402
lax.pcast = pcast

# Side effects and state: effects in jaxprs, host callbacks, mutable Refs.
from . import effects, callback, debug, state  # noqa: E402
from .state import Ref, new_ref  # noqa: E402,F401
from .callback import ShapeDtypeStruct, pure_callback, io_callback  # noqa: E402,F401

__all__ = ["jvp", "vmap", "jacfwd", "jacrev", "hessian", "make_jaxpr", "jit", "Array",
           "linearize", "vjp", "grad", "value_and_grad", "lax", "numpy", "nn", "tree_util",
           "Primitive", "closure_convert", "custom_jvp", "custom_vjp", "checkpoint", "remat",
           "checkpoint_policies", "ad_checkpoint", "devices", "make_mesh", "device_put",
           "shard_map", "sharding", "P", "set_mesh", "typeof", "debug", "pure_callback",
           "io_callback", "ShapeDtypeStruct", "new_ref", "Ref", "block_until_ready"]


def __getattr__(name):   # a JAX name that autodidax leaves out: say so
  raise lax.not_in_autodidax("jax", name)
