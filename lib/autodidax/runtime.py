"""The XLA runtime: the only module that touches jax or jaxlib.

autodidax implements every transformation itself. From jaxlib it borrows only
what a compiler back end provides: a PJRT client for a platform, compilation
of StableHLO text to an executable, device buffers, and execution. Those APIs
are private and move between releases, so requirements.txt pins jax/jaxlib
exactly and everything version-specific is in this one file.

jax is imported on first use, so `import autodidax` stays fast.
"""
from __future__ import annotations

import functools
import os
from typing import NamedTuple

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")   # no PJRT start-up chatter

DEFAULT_PLATFORM_ENV = "AUTODIDAX_PLATFORM"   # "cpu" (default), "gpu"/"cuda", ...
# Set, so that reading it (on every jit call) doesn't raise and catch a KeyError
# inside os.environ.get: that alone made a cached call ~15% slower.
os.environ.setdefault(DEFAULT_PLATFORM_ENV, "cpu")


@functools.cache
def _jax():
  """Import jax lazily and return the handful of modules we use."""
  import jax
  from jax._src.lib import xla_client
  from jax.extend import backend
  return jax, backend, xla_client


def default_platform() -> str:
  return os.environ.get(DEFAULT_PLATFORM_ENV, "cpu").lower()


@functools.cache
def client(platform: str | None = None):
  """The PJRT client for `platform` ('cpu', 'gpu', 'cuda', ...)."""
  _, backend, _ = _jax()
  platform = {"gpu": "cuda"}.get(platform or default_platform(), platform or default_platform())
  try:
    return backend.get_backend(platform)
  except RuntimeError as e:
    raise RuntimeError(
        f"No XLA backend for platform {platform!r} ({e}). CPU always works; a "
        "GPU needs jax's CUDA plugin installed (pip install jax[cuda12]).") from None


def available_platforms() -> list[str]:
  out = []
  for p in ("cpu", "cuda", "rocm"):
    try:
      client(p)
      out.append(p)
    except RuntimeError:
      pass
  return out


def device(platform: str | None = None):
  return client(platform).local_devices()[0]


# --- Buffers --------------------------------------------------------------------------------

@functools.cache
def _sharding(platform):
  _, _, xc = _jax()
  return xc.SingleDeviceSharding(device(platform))


@functools.cache
def _jax_aval(shape, dtype):
  jax, _, _ = _jax()
  return jax.core.ShapedArray(shape, dtype)


def device_put(x, platform: str | None = None):
  """Copy a host array to the device: a buffer object the executables accept."""
  x = np.asarray(x)
  return _device_putter(platform)(_jax_aval(x.shape, x.dtype), x)


@functools.cache
def _device_putter(platform):
  """`put(aval, x)` for one platform, with everything but the array looked up once.

  `enable_x64=True` keeps NumPy's 64-bit dtypes (jax would squash float64 to
  float32 by default) without touching the user's jax configuration.
  """
  _, _, xc = _jax()
  sharding, devices, put = _sharding(platform), [device(platform)], xc.batched_device_put
  return lambda aval, x: put(aval, sharding, [x], devices, enable_x64=True)


def to_numpy(buf) -> np.ndarray:
  return np.asarray(buf)


def is_buffer(x) -> bool:
  _, _, xc = _jax()
  return isinstance(x, xc.ArrayImpl)


# --- Compilation and execution -------------------------------------------------------------

class Executable:
  """A compiled XLA program and the calls we make on it."""

  def __init__(self, loaded, platform: str):
    self._loaded, self.platform = loaded, platform
    self.in_avals = self.out_avals = None   # xla.compile_jaxpr fills them in

  def execute(self, buffers: list) -> list:
    """Run on device buffers; returns device buffers (one per output).

    No x64 switch is needed here: the buffers carry their dtypes, and the
    outputs get the executable's (float64 stays float64).
    """
    results = self._loaded.execute_sharded(buffers)
    return [outs[0] for outs in results.disassemble_into_single_device_arrays()]

  def hlo_text(self) -> str:
    """XLA's optimized HLO, after fusion and the other passes."""
    return self._loaded.hlo_modules()[0].to_string()

  def cost_analysis(self) -> dict:
    costs = self._loaded.cost_analysis()
    return dict(costs[0] if isinstance(costs, (list, tuple)) else costs)

  def memory_analysis(self) -> "MemoryStats":
    """The sizes, in bytes, of the buffers XLA assigned when it compiled."""
    stats = self._loaded.get_compiled_memory_stats()
    return MemoryStats(*(getattr(stats, f) for f in MemoryStats._fields))


class MemoryStats(NamedTuple):
  """What `compiled.memory_analysis()` reports, as in JAX. `temp` holds the
  intermediate values, residuals included; `peak` bounds what is live at once."""
  argument_size_in_bytes: int
  output_size_in_bytes: int
  alias_size_in_bytes: int
  temp_size_in_bytes: int
  generated_code_size_in_bytes: int

  @property
  def peak_bytes(self) -> int:
    return (self.argument_size_in_bytes + self.output_size_in_bytes
            - self.alias_size_in_bytes + self.temp_size_in_bytes)


def compile(stablehlo_text: str, platform: str | None = None) -> Executable:
  """Compile a StableHLO module, given as MLIR text, for one device."""
  _, _, xc = _jax()
  platform = platform or default_platform()
  c = client(platform)
  loaded = c.compile_and_load(stablehlo_text, xc.DeviceList((device(platform),)),
                              xc.CompileOptions())
  return Executable(loaded, platform)


def verify(stablehlo_text: str) -> None:
  """Parse and verify MLIR text with jaxlib's MLIR bindings; raise if invalid."""
  _jax()
  from jax._src.interpreters import mlir
  from jaxlib.mlir import ir
  with mlir.make_ir_context():
    module = ir.Module.parse(stablehlo_text)
    if not module.operation.verify():
      raise ValueError("the StableHLO module does not verify")
