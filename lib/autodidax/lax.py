"""`autodidax.lax`, the public namespace, as `jax.lax`: one wrapper per
primitive, control flow and the collectives, all in one place.

It only hands names on. The primitives and their wrappers are written in
`primitives.py` (JAX: jax/_src/lax/lax.py), control flow in `control_flow/`,
the collectives in `parallel.py` and `pcast` in `shard_map.py`. Those build on
the primitives, so this namespace sits above all of them (JAX: jax/lax/__init__.py).
"""
from .primitives import *  # noqa: F401,F403  (every wrapper, primitive and rule table)
from .control_flow import (cond, cond_p, fori_loop, scan, scan_p, switch,  # noqa: F401
                           while_loop, while_p)
from .parallel import (all_gather, axis_index, pmax, pmean, pmin, ppermute, psum,  # noqa: F401
                       psum_scatter)
from .shard_map import pcast  # noqa: F401
from .util import not_in_autodidax


def __getattr__(name):   # a name of jax.lax that autodidax leaves out: say so
  raise not_in_autodidax("jax.lax", name)
