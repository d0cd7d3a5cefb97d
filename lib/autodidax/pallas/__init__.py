"""A small Pallas on the course's Refs (JAX's `jax.experimental.pallas`, as `pl`)."""
from ..callback import ShapeDtypeStruct
from ..state import Slice, ds
from .core import BlockSpec
from .helpers import when
from .pallas_call import PallasReverseModeError, pallas_call, pallas_call_p
from .primitives import num_programs, program_id, program_id_p

__all__ = ["BlockSpec", "PallasReverseModeError", "ShapeDtypeStruct", "Slice", "ds",
           "num_programs", "pallas_call", "pallas_call_p", "program_id", "program_id_p",
           "when"]
