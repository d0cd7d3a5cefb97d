"""Pytrees: flatten/unflatten round trips, PyTreeDef, tree_map,
broadcast_prefix and flatten_fun, checked against jax.tree_util where the two
libraries agree."""
import collections

import jax
import numpy as np
import pytest

import autodidax as adx
from autodidax import tree_util as tu

Point = collections.namedtuple("Point", "x y")


class Box:
  """A user container: two children and some static aux data."""

  def __init__(self, a, b, tag="t"):
    self.a, self.b, self.tag = a, b, tag

  def __eq__(self, other):
    return (type(other) is Box and (self.a, self.b, self.tag) == (other.a, other.b, other.tag))


tu.register_pytree_node(Box, lambda bx: ((bx.a, bx.b), bx.tag),
                        lambda tag, kids: Box(*kids, tag=tag))
jax.tree_util.register_pytree_node(Box, lambda bx: ((bx.a, bx.b), bx.tag),
                                   lambda tag, kids: Box(*kids, tag=tag))

TREES = [
    1.0,
    (),
    (1,),
    (1, 2.0),
    [1, [2, (3, 4)], 5],
    {"b": 1, "a": 2, "c": (3, 4)},
    {"z": {"y": 1, "x": [2, 3]}, "a": None},
    None,
    (None, 1, [None, 2]),
    Point(1, (2, 3)),
    [Point(x={"q": 1, "p": 2}, y=None)],
    Box(1, (2, 3)),
    Box(Box(1, 2, "in"), [3], "out"),
    {"k": np.arange(3.0), "j": np.float32(2)},
]


def _tree_id(tree):   # deterministic across processes (no object addresses)
  return str(tu.tree_structure(tree))


@pytest.mark.parametrize("tree", TREES, ids=_tree_id)
def test_round_trip(tree):
  leaves, treedef = tu.tree_flatten(tree)
  out = tu.tree_unflatten(treedef, leaves)
  jleaves, jtreedef = jax.tree_util.tree_flatten(tree)
  assert len(leaves) == len(jleaves) == treedef.num_leaves == jtreedef.num_leaves
  for a, b in zip(leaves, jleaves):   # the same leaves in the same order
    assert a is b
  assert type(out) is type(tree)
  assert jax.tree_util.tree_structure(out) == jtreedef
  assert all(a is b for a, b in zip(tu.tree_leaves(out), leaves))


def test_dict_leaves_follow_sorted_keys():
  d = {"b": 1, "c": 2, "a": 3}
  assert tu.tree_leaves(d) == jax.tree_util.tree_leaves(d) == [3, 1, 2]
  rebuilt = tu.tree_unflatten(tu.tree_structure(d), [10, 20, 30])
  assert rebuilt == {"a": 10, "b": 20, "c": 30}


def test_none_is_an_empty_node():
  assert tu.tree_leaves([None, 1, None]) == jax.tree_util.tree_leaves([None, 1, None]) == [1]
  assert tu.tree_structure(None).num_leaves == 0
  assert tu.tree_unflatten(tu.tree_structure([None, 1]), [5]) == [None, 5]


def test_namedtuple_is_a_node_not_a_leaf():
  p = Point(1, 2)
  leaves, treedef = tu.tree_flatten(p)
  assert leaves == [1, 2]
  assert tu.tree_unflatten(treedef, [3, 4]) == Point(3, 4)
  assert type(tu.tree_unflatten(treedef, [3, 4])) is Point


def test_registered_class_keeps_aux_data():
  leaves, treedef = tu.tree_flatten(Box(1, [2, 3], tag="hello"))
  assert leaves == [1, 2, 3]
  assert tu.tree_unflatten(treedef, ["a", "b", "c"]) == Box("a", ["b", "c"], "hello")
  assert tu.tree_structure(Box(0, [0, 0], "hello")) == treedef
  assert tu.tree_structure(Box(0, [0, 0], "other")) != treedef


@pytest.mark.parametrize("a, b, equal", [
    ((1, 2), (3, 4), True),
    ((1, 2), [1, 2], False),
    ((1, 2), (1, 2, 3), False),
    ((1, (2,)), (1, 2), False),
    ({"a": 1}, {"a": 2}, True),
    ({"a": 1}, {"b": 1}, False),
    (Point(1, 2), (1, 2), False),
    (Point(1, 2), Point(5, 6), True),
    (None, (), False),
    (None, None, True),
    ([np.ones(3)], [1.0], True),          # leaves' types and shapes don't matter
])
def test_treedef_equality_matches_jax(a, b, equal):
  assert (tu.tree_structure(a) == tu.tree_structure(b)) == equal
  assert (jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)) == equal
  if equal:
    assert hash(tu.tree_structure(a)) == hash(tu.tree_structure(b))
    assert len({tu.tree_structure(a), tu.tree_structure(b)}) == 1


@pytest.mark.parametrize("tree", [
    1.0, (1,), (1, 2), [1, 2], {"a": 1, "b": (2, 3)}, None, (None,), [(1,), [2, {"x": 3}]],
    (), [],
], ids=_tree_id)
def test_treedef_str_matches_jax(tree):
  ours = tu.tree_structure(tree)
  assert repr(ours) == str(jax.tree_util.tree_structure(tree))
  assert repr(ours) == f"PyTreeDef({ours})"


def test_treedef_str_of_user_nodes_names_them():
  assert str(tu.tree_structure(Point(1, 2))) == "Point(*, *)"
  assert str(tu.tree_structure(Box(1, 2))) == "Box(*, *)"


@pytest.mark.parametrize("trees", [
    ((1, 2),), ((1, [2, 3]), (10, [20, 30])), ({"b": 1, "a": 2}, {"a": 3, "b": 4}),
    ((None, 1), (None, 2)), (Point(1, 2), Point(3, 4)), (Box(1, 2), Box(3, 4)),
])
def test_tree_map_matches_jax(trees):
  f = lambda *xs: sum(xs) * 10 + len(xs)
  assert tu.tree_map(f, *trees) == jax.tree_util.tree_map(f, *trees)


def test_tree_map_mismatch():
  with pytest.raises(tu.TreeMismatchError, match=r"expected \(\*, \*\), got \[\*, \*\]"):
    tu.tree_map(lambda a, b: a, (1, 2), [1, 2])
  with pytest.raises(ValueError, match="structures differ"):
    tu.tree_map(lambda a, b: a, {"a": 1}, {"b": 1})


def test_unflatten_wrong_leaf_count():
  treedef = tu.tree_structure((1, 2))
  with pytest.raises(ValueError, match="Too few leaves"):
    tu.tree_unflatten(treedef, [1])
  with pytest.raises(ValueError, match="Too many leaves"):
    tu.tree_unflatten(treedef, [1, 2, 3])


@pytest.mark.parametrize("prefix, tree, expected", [
    (0, (1, 2, 3), [0, 0, 0]),
    (None, (1, [2, 3]), [None, None, None]),
    ((0, None), (1, [2, 3]), [0, None, None]),
    ((0, [1, None]), (1, [2, 3]), [0, 1, None]),
    ({"a": 1, "b": None}, {"b": (5, 6), "a": 7}, [1, None, None]),
    ((0, 1), ({"x": 1, "y": 2}, None), [0, 0]),     # None subtree: no leaves
    (Point(0, 1), Point((1, 2), 3), [0, 0, 1]),
    ((2,), (np.ones(3),), [2]),
])
def test_broadcast_prefix(prefix, tree, expected):
  assert tu.broadcast_prefix(prefix, tree) == expected
  assert len(expected) == len(tu.tree_leaves(tree))


@pytest.mark.parametrize("prefix, tree", [
    ((0, 0, 0), (1, 2)),
    ([0, 0], (1, 2)),
    ({"a": 0}, {"b": 1}),
    ((0, (0, 0)), (1, 2)),
])
def test_broadcast_prefix_mismatch(prefix, tree):
  with pytest.raises(ValueError, match="in_axes .* doesn't match the structure"):
    tu.broadcast_prefix(prefix, tree, "in_axes")


def test_flatten_fun():
  def f(pair, d):
    return {"sum": pair[0] + pair[1], "both": (d["u"], pair)}

  args = ((1, 2), {"u": 3})
  flat_args, in_tree = tu.tree_flatten(args)
  flat_f, out_tree = tu.flatten_fun(f, in_tree)
  with pytest.raises(AssertionError, match="not run yet"):
    out_tree()
  out_flat = flat_f(*flat_args)
  assert out_flat == tu.tree_leaves(f(*args))
  assert tu.tree_unflatten(out_tree(), out_flat) == f(*args)
  assert str(out_tree()) == "{'both': (*, (*, *)), 'sum': *}"
  with pytest.raises(AssertionError, match="ran twice"):
    flat_f(*flat_args)


def test_pytrees_through_transformations():
  """jvp and vmap accept and return containers, user nodes included."""
  def f(b, p):
    return {"s": b.a * p.x, "t": Box(b.b, p.y, tag=b.tag)}

  b, p = Box(2.0, np.arange(3.0), "k"), Point(3.0, 1.0)
  out, tan = adx.jvp(f, (b, p), (Box(1.0, np.ones(3), "k"), Point(0.0, 0.0)))
  assert out["t"].tag == "k" and tan["t"].tag == "k"
  np.testing.assert_allclose(tan["s"], 3.0)
  np.testing.assert_allclose(tan["t"].a, np.ones(3))
  ys = adx.vmap(f, in_axes=(Box(0, None, "k"), None))(Box(np.arange(4.0), np.ones(3), "k"), p)
  np.testing.assert_allclose(ys["s"], 3.0 * np.arange(4.0))
  assert np.shape(ys["t"].a) == (4, 3)
