"""Pictures of the machinery: the interpreter stack, boxed values, and binds.

    with viz.capture() as snaps:          # look inside a transformation
      jvp(lambda x: viz.peek(x) * 2., (3.,), (1.,))
    snaps[0]                              # stack + boxing, drawn by graphviz

    with viz.record() as rec:             # every bind, in order
      vmap(f)(xs)
    rec.stepper()                         # a widget that steps through them

One module per kind of picture; what they all share (colours, the graphviz
graph named by its alt text, the HTML that fits a picture to the column) is
in `draw`. Rendering needs the `graphviz` Python package and a `dot` program;
widgets need ipywidgets. Neither is imported until a picture is asked for.
"""
from .binds import Recording, bind_tree, record
from .calls import pp_traced, trace, trace_note, tracing
from .dispatch import DispatchRecording, record_dispatch, trace_chain_graph
from .draw import HIGHLIGHT, TRACE_COLORS, short, svg_html
from .dtypes import dtype_lattice
from .effects import discharge_frames, discharge_graph, discharge_stepper, token_graph
from .jaxprs import jaxpr_graph, jaxpr_graph_nested, jaxpr_picture
from .jit import jit_pipeline
from .kernels import blocks_seen, grid_blocks
from .panes import ByWidth, Columns, SideBySide, Stacked, explorer, side_by_side
from .partial_eval import forward_linear_transposed, partial_eval_graph, unzipping
from .remat import REMAT_STYLES, policy_name, remat_graph, remat_split
from .rules import (CUSTOM_CALL_USES, CUSTOM_VJP_FAILS, TRANSFORMATION_RULES, custom_call_graph,
                    rules_graph)
from .shardings import (AXIS_COLORS, TILE_COLORS, collective_graph, hlo_entry, sharding_explorer,
                        sharding_graph, typed_jaxpr_graph, wrap_lines)
from .stack import Snapshot, capture, peek, stack_graph
