"""JAX's type-promotion lattice."""
from __future__ import annotations

from .. import core
from ..dtypes import LATTICE
from .draw import digraph


def dtype_lattice():
  """JAX's type-promotion lattice (autodidax.dtypes.LATTICE), lowest at the
  bottom: two dtypes promote to the lowest node above both. The weak types
  of Python scalars are dashed."""
  name = lambda n: n if isinstance(n, str) else core.dtype_short(n)
  g = digraph("JAX's type-promotion lattice: each dtype points to the types it "
              "promotes to; two dtypes promote to the lowest type above both", rankdir="BT")
  for node in LATTICE:
    weak = isinstance(node, str)
    g.node(name(node), shape="box", style="dashed" if weak else "solid")
  for node, above in LATTICE.items():
    for up in above:
      g.edge(name(node), name(up))
  return g
