"""Pytrees: nested containers of arrays, flattened to lists and back.

Transformations work on flat lists of arrays. `flatten_fun` wraps a user
function so that it takes and returns flat lists, and reports the structure of
its output once it has run.
"""
from __future__ import annotations

from typing import Any, Callable, Hashable, NamedTuple


class NodeType(NamedTuple):
  name: str
  flatten: Callable      # node -> (children, aux_data)
  unflatten: Callable    # (aux_data, children) -> node
  cls: type | None = None   # the Python class: two classes of one name differ


node_types: dict[type, NodeType] = {}


def register_pytree_node(nodetype: type, flatten_func: Callable,
                         unflatten_func: Callable) -> None:
  """Teach pytrees a container type (same signature as jax.tree_util's)."""
  node_types[nodetype] = NodeType(nodetype.__name__, flatten_func, unflatten_func, nodetype)


register_pytree_node(tuple, lambda t: (t, None), lambda _, xs: tuple(xs))
register_pytree_node(list, lambda l: (l, None), lambda _, xs: list(xs))
register_pytree_node(
    dict, lambda d: ([d[k] for k in sorted(d)], tuple(sorted(d))),
    lambda keys, xs: dict(zip(keys, xs)))
register_pytree_node(type(None), lambda _: ((), None), lambda _, __: None)


def _node_type(x) -> NodeType | None:
  ty = type(x)
  nt = node_types.get(ty)
  if nt is None and issubclass(ty, tuple) and hasattr(ty, "_fields"):
    nt = NodeType(ty.__name__, lambda t: (tuple(t), None),
                  lambda _, xs, ty=ty: ty(*xs), ty)   # namedtuples
  return nt


class PyTreeDef(NamedTuple):
  node_type: NodeType | None      # None for a leaf
  aux_data: Hashable
  children: tuple

  @property
  def num_leaves(self) -> int:
    if self.node_type is None:
      return 1
    return sum(c.num_leaves for c in self.children)

  def __str__(self):
    if self.node_type is None:
      return "*"
    kids = [str(c) for c in self.children]
    name = self.node_type.name
    if name == "tuple":
      return f"({', '.join(kids)}{',' if len(kids) == 1 else ''})"
    if name == "list":
      return f"[{', '.join(kids)}]"
    if name == "dict":
      return "{" + ", ".join(f"{k!r}: {c}" for k, c in zip(self.aux_data, kids)) + "}"
    if name == "NoneType":
      return "None"
    return f"{name}({', '.join(kids)})"

  def __repr__(self):
    return f"PyTreeDef({self})"

  def __eq__(self, other):
    return (isinstance(other, PyTreeDef)
            and (self.node_type and self.node_type.cls) ==
                (other.node_type and other.node_type.cls)
            and self.aux_data == other.aux_data and self.children == other.children)

  def __ne__(self, other):   # not tuple's, which compares the node functions
    return not self == other

  def __hash__(self):
    return hash((self.node_type and self.node_type.cls, self.aux_data, self.children))


LEAF = PyTreeDef(None, None, ())


def tree_flatten(x: Any) -> tuple[list, PyTreeDef]:
  leaves: list = []
  treedef = _flatten(x, leaves)
  return leaves, treedef


def _flatten(x, leaves) -> PyTreeDef:
  nt = _node_type(x)
  if nt is None:
    leaves.append(x)
    return LEAF
  children, aux = nt.flatten(x)
  return PyTreeDef(nt, aux, tuple(_flatten(c, leaves) for c in children))


def tree_unflatten(treedef: PyTreeDef, leaves) -> Any:
  it = iter(leaves)
  out = _unflatten(treedef, it)
  if next(it, _SENTINEL) is not _SENTINEL:
    raise ValueError(f"Too many leaves for {treedef}")
  return out


_SENTINEL = object()


def _unflatten(treedef, it):
  if treedef.node_type is None:
    leaf = next(it, _SENTINEL)
    if leaf is _SENTINEL:
      raise ValueError("Too few leaves for the tree structure")
    return leaf
  children = [_unflatten(c, it) for c in treedef.children]
  return treedef.node_type.unflatten(treedef.aux_data, children)


def tree_leaves(x) -> list:
  return tree_flatten(x)[0]


def tree_structure(x) -> PyTreeDef:
  return tree_flatten(x)[1]


def tree_map(f: Callable, tree, *rest):
  leaves, treedef = tree_flatten(tree)
  others = [tree_flatten(r) for r in rest]
  for leaves_r, treedef_r in others:
    if treedef_r != treedef:
      raise TreeMismatchError("tree_map", treedef, treedef_r)
  return tree_unflatten(treedef, [f(*xs) for xs in zip(leaves, *(l for l, _ in others))])


class TreeMismatchError(ValueError):
  def __init__(self, what: str, expected: PyTreeDef, got: PyTreeDef):
    super().__init__(f"{what}: pytree structures differ: expected {expected}, "
                     f"got {got}. Pass containers of the same shape.")


def broadcast_prefix(prefix, tree, what: str = "prefix") -> list:
  """Flat list with one entry of `prefix` per leaf of `tree`.

  `prefix` is a tree whose leaves stand for whole subtrees of `tree` (like
  vmap's `in_axes`); None in `prefix` is a leaf, not an empty node.
  """
  out: list = []

  def go(p, t):
    nt_p = None if p is None else _node_type(p)
    if nt_p is None:
      out.extend([p] * tree_structure(t).num_leaves)
      return
    nt_t = _node_type(t)
    p_kids, p_aux = nt_p.flatten(p)
    if nt_t is None or nt_t.cls is not nt_p.cls:
      raise ValueError(f"{what} {p!r} doesn't match the structure "
                       f"{tree_structure(t)} it applies to")
    t_kids, t_aux = nt_t.flatten(t)
    if p_aux != t_aux or len(p_kids) != len(t_kids):
      raise ValueError(f"{what} {p!r} doesn't match the structure "
                       f"{tree_structure(t)} it applies to")
    for pc, tc in zip(p_kids, t_kids):
      go(pc, tc)

  go(prefix, tree)
  return out


# --- Flattening user functions -------------------------------------------------------

class Store:
  """A cell written once, when the wrapped function runs."""
  _EMPTY = object()

  def __init__(self):
    self.val = Store._EMPTY

  def set_value(self, val):
    assert self.val is Store._EMPTY, "the function ran twice"
    self.val = val

  def __call__(self):
    assert self.val is not Store._EMPTY, "the function has not run yet"
    return self.val


def flatten_fun(f: Callable, in_tree: PyTreeDef) -> tuple[Callable, Store]:
  """Wrap `f` to take and return flat lists; the store gets the output tree."""
  store = Store()

  def flat_fun(*args_flat):
    out = f(*tree_unflatten(in_tree, args_flat))
    out_flat, out_tree = tree_flatten(out)
    store.set_value(out_tree)
    return out_flat

  return flat_fun, store
