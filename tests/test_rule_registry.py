"""Higher-order primitives keep the same rules as their siblings.

A higher-order primitive (one whose params hold jaxprs: jit, cond, while,
scan, remat, custom_jvp_call, custom_vjp_call, shard_map, and any later
one) needs a rule in every table the others have one in: a missing
named-axis batching rule made collectives inside remat and custom_jvp
batch as if unnamed, a silent wrong value. The tables are found, not
listed: every `RuleTable` (and every `*_rules` dict keyed by primitives)
in the package, so a table added later (sharding, effects) is checked too.
"""
import importlib
import inspect
import pkgutil

import pytest

import autodidax
from autodidax import batching, core, parallel
from autodidax.ad_checkpoint import remat_p
from autodidax.custom_derivatives import custom_jvp_call_p, custom_vjp_call_p
from autodidax.flop_count import flops_call_rules, flops_rules

KNOWN = {"xla_call", "cond", "while", "scan", "remat", "custom_jvp_call",
         "custom_vjp_call", "shard_map"}

# Tables where a rule is optional, and why.
OPTIONAL_TABLES = {
    "pp_params_rules": "printing: params print sorted by name unless a rule says otherwise",
    "partial_eval_rules": "a primitive without one is staged whole when an input is unknown",
    "partial_eval_jaxpr_rules": "likewise, when partial_eval_jaxpr splits a jaxpr",
    "linearize_rules": "stackless linearizes a primitive with a jaxpr by partial evaluation",
}
# A rule that one higher-order primitive may lack, and why.
EXEMPT = {
    ("Transpose", "custom_vjp_call"): "JAX has none either: bwd is its only linear map",
}


def _modules():
  return [importlib.import_module(m.name)
          for m in pkgutil.walk_packages(autodidax.__path__, "autodidax.")]


def _primitives(modules) -> set:
  return {v for m in modules for v in vars(m).values() if isinstance(v, core.Primitive)}


def _tables(modules) -> dict:
  """Every rule table of the package, by a name (a RuleTable's kind)."""
  found = {}
  for m in modules:
    for name, v in vars(m).items():
      if isinstance(v, core.RuleTable):
        found[id(v)] = (v.kind, v)
      elif isinstance(v, dict) and name.endswith("_rules") and id(v) not in found:
        found[id(v)] = (name, v)
  return dict(found.values())


def _takes_jaxpr(rule) -> bool:
  try:
    params = inspect.signature(rule).parameters
  except (TypeError, ValueError):
    return False
  return any("jaxpr" in p or p == "branches" for p in params)


def higher_order(prims) -> set:
  """The primitives whose impl or abstract eval takes a jaxpr, or that count
  FLOPS by running sub-jaxprs."""
  return {p for p in prims if p in flops_call_rules or _takes_jaxpr(core.impl_rules.get(p))
          or _takes_jaxpr(core.abstract_eval_rules.get(p))}


def missing_rules() -> list:
  """(table, primitive) for each rule a higher-order primitive lacks that a
  sibling has; FLOPS may come from either FLOPS table."""
  modules = _modules()
  hops = higher_order(_primitives(modules))
  missing = []
  for kind, table in sorted(_tables(modules).items()):
    if kind in OPTIONAL_TABLES or table is flops_call_rules:
      continue
    if table is flops_rules:   # by a cost rule, or by running the sub-jaxprs
      kind, table = "FLOPS", {**flops_rules, **flops_call_rules}
    have = {p for p in hops if p in table}
    if have:
      missing += [(kind, p.name) for p in hops - have if (kind, p.name) not in EXEMPT]
  return sorted(missing)


def test_higher_order_primitives_are_found():
  assert KNOWN <= {p.name for p in higher_order(_primitives(_modules()))}


def test_every_higher_order_primitive_has_its_siblings_rules():
  assert missing_rules() == []


@pytest.mark.parametrize("prim", [remat_p, custom_jvp_call_p, custom_vjp_call_p],
                         ids=lambda p: p.name)
def test_the_check_fails_without_a_named_axis_batching_rule(prim, monkeypatch):
  monkeypatch.delitem(batching.axis_vmap_rules, prim)
  assert ("Named-axis batching", prim.name) in missing_rules()


def test_collectives_are_not_higher_order():
  assert not higher_order(set(parallel.collective_primitives))
