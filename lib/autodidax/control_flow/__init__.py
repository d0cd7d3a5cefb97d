"""Control flow as higher-order primitives: cond, while and scan.

Python's own `if` and `for` run while tracing, so they vanish from a jaxpr.
To *stage* a data-dependent choice or loop, the user passes functions to
`cond`/`switch`, `while_loop`/`fori_loop` or `scan`. Each function is traced
to a jaxpr (closure conversion: values it closes over are hoisted out as
constants and passed in as ordinary operands), and one equation holds the
jaxprs as parameters, like `xla_call` does for `jit`:

    cond[branches=(jaxpr, ...)]            index, *operands
    while[cond_jaxpr, body_jaxpr, ...]     *cond_consts, *body_consts, *carry
    scan[jaxpr, num_consts, num_carry, ...] *consts, *carry, *xs

Every transformation meets them through rules, and each rule transforms the
inner jaxprs and binds a new equation. As in jax/_src/lax/control_flow/:
`common` holds what they share (closure conversion, lowering regions),
`conditionals` cond and switch, `loops` while and scan. (`select_n` and
`clamp`, which they use, are first-order primitives: autodidax.primitives.) Each registers its FLOPS rule with the
counter, `autodidax.flop_count`, like its other rules.
"""
from ..primitives import clamp, clamp_p, select_n, select_n_p  # noqa: F401
from .common import join_consts  # noqa: F401
from .conditionals import cond, cond_p, switch  # noqa: F401
from .loops import (WhileLoopReverseModeError, fori_loop, scan, scan_p,  # noqa: F401
                    while_loop, while_p)

__all__ = ["cond", "switch", "while_loop", "fori_loop", "scan", "select_n", "clamp",
           "cond_p", "while_p", "scan_p", "select_n_p", "clamp_p"]
