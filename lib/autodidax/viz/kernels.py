"""Kernels: which block of each operand each point of a pallas_call's grid sees."""
from __future__ import annotations

import html
import itertools

import numpy as np

from ..api import make_jaxpr
from ..jaxpr import eval_jaxpr
from ..pallas.pallas_call import pallas_call_p
from .draw import digraph, titled
from .shardings import TILE_COLORS

OPERAND_COLORS = ["#3b82f6", "#f59e0b", "#10b981", "#ef4444", "#8b5cf6", "#ec4899"]


def _pallas_eqn(f, args):
  eqns = [e for e in make_jaxpr(f)(*args).jaxpr.eqns if e.primitive is pallas_call_p]
  if len(eqns) != 1:
    raise ValueError(f"grid_blocks draws a function with one pallas_call; this has {len(eqns)}")
  return eqns[0]


def blocks_seen(f, *args):
  """`{grid point: [block index of each operand]}`, in the order the runs happen."""
  eqn = _pallas_eqn(f, args)
  maps = eqn.params["in_mappings"] + eqn.params["out_mappings"]
  out = {}
  for point in itertools.product(*map(range, eqn.params["grid"])):
    ids = [np.int32(i) for i in point]
    out[point] = [tuple(int(np.asarray(b)) for b in eval_jaxpr(m.index_map, [], *ids))
                  for m in maps]
  return out


def _mini(m, block, color) -> str:
  """An operand as a small grid of its blocks, the one seen filled in."""
  counts = [p // s for p, s in zip(m.padded_shape, m.sizes)][-2:]
  rows, cols = ([1] + counts)[-2:] if len(counts) < 2 else counts
  seen = (([0] + list(block))[-2:]) if len(block) < 2 else list(block)[-2:]
  cell = max(5, min(10, 40 // max(rows, cols)))
  trs = "".join(
      "<TR>" + "".join(
          f'<TD WIDTH="{cell}" HEIGHT="{cell}" FIXEDSIZE="TRUE" BGCOLOR='
          f'"{color if [r, c] == seen else "#ffffff"}"></TD>' for c in range(cols)) + "</TR>"
      for r in range(rows))
  return (f'<TABLE BORDER="0" CELLBORDER="1" CELLSPACING="0" COLOR="#888888">{trs}</TABLE>')


def grid_blocks(f, *args, names=None, title: str | None = None, max_points: int = 12):
  """One cell per grid point (the grid's first axis down, the rest across),
  each showing every operand as a grid of its blocks, with the block that
  point's kernel run sees filled in the operand's colour."""
  eqn = _pallas_eqn(f, args)
  maps = eqn.params["in_mappings"] + eqn.params["out_mappings"]
  n_in = len(eqn.params["in_mappings"])
  names = names or [f"in{k}" for k in range(n_in)] + [
      f"out{k}" for k in range(len(maps) - n_in)]
  grid = eqn.params["grid"]
  seen = blocks_seen(f, *args)
  points = list(seen)[:max_points]
  across = int(np.prod(grid[1:])) if len(grid) > 1 else len(points)
  across = min(across, 3)
  alt = (f"A pallas_call over the grid {grid}: {len(seen)} kernel runs. For each run, the "
         f"block of each operand ({', '.join(names)}) that it reads or writes, filled in.")
  g = digraph(titled(title, alt))
  legend = "".join(f'<TD><FONT COLOR="{OPERAND_COLORS[k % 6]}"><B>{html.escape(n)}</B></FONT>'
                   f' {html.escape(str(tuple(m.array_aval.shape)))}</TD>'
                   for k, (n, m) in enumerate(zip(names, maps)))
  rows = [f'<TR><TD COLSPAN="{across}" BORDER="0"><TABLE BORDER="0"><TR>{legend}'
          "</TR></TABLE></TD></TR>",
          f'<TR><TD COLSPAN="{across}" BORDER="0">each box: one kernel run, at its '
          "program_id</TD></TR>"]
  for start in range(0, len(points), across):
    tds = ""
    for p in points[start:start + across]:
      minis = "".join(f"<TD>{_mini(m, b, OPERAND_COLORS[k % 6])}</TD>"
                      for k, (m, b) in enumerate(zip(maps, seen[p])))
      tds += (f'<TD BGCOLOR="{TILE_COLORS[0]}"><TABLE BORDER="0" CELLSPACING="3"><TR><TD '
              f'COLSPAN="{len(maps)}">{html.escape(str(p))}</TD></TR>'
              f"<TR>{minis}</TR></TABLE></TD>")
    rows.append(f"<TR>{tds}</TR>")
  more = len(seen) - len(points)
  if more:
    rows.append(f'<TR><TD COLSPAN="{across}" BORDER="0">… and {more} more runs</TD></TR>')
  g.node("grid", f'<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="4">{"".join(rows)}</TABLE>>',
         shape="plaintext")
  return g
