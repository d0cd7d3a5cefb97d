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
  # Deferred, as all of jax here (the XLA runtime, below every layer of the library):
  # `import autodidax` stays fast and starts no XLA client.
  import jax   # deferred: see above
  from jax._src.lib import xla_client   # deferred: see above
  from jax.extend import backend   # deferred: see above
  return jax, backend, xla_client


@functools.cache
def _mlir():
  """jax's MLIR context and jaxlib's MLIR bindings, for parsing StableHLO text."""
  _jax()
  from jax._src.interpreters import mlir   # deferred with the rest of jax (see _jax)
  from jaxlib.mlir import ir   # deferred with the rest of jax (see _jax)
  return mlir, ir


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

  def __init__(self, loaded, platform: str, ordered: bool = False):
    self._loaded, self.platform, self.ordered = loaded, platform, ordered
    self.callback_errors: list = []   # what host callbacks raised (see `compile`)
    self.in_avals = self.out_avals = None   # xla.compile_jaxpr fills them in

  def execute(self, buffers: list) -> list:
    """Run on device buffers; returns device buffers (one per output).

    No x64 switch is needed here: the buffers carry their dtypes, and the
    outputs get the executable's (float64 stays float64). An `ordered`
    program takes the token the last one returned, and returns the next.
    """
    try:
      if self.ordered:
        token = _tokens.get(self.platform)
        buffers = [device_put(_NO_TOKEN, self.platform) if token is None else token,
                   *buffers]
      results = self._loaded.execute_sharded(buffers)
      outs = [outs[0] for outs in results.disassemble_into_single_device_arrays()]
      if self.ordered:
        _tokens[self.platform] = outs.pop(0)
      return outs
    except Exception:
      if self.callback_errors:   # a host callback raised: that error, not XLA's
        error = self.callback_errors.pop()
        self.callback_errors.clear()
        raise error
      raise

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


# The runtime's token, per platform: what the last program with ordered
# effects returned, passed to the next one, so that their effects happen in
# the order of the calls (JAX's RuntimeTokenSet). At first, an empty array:
# @main's `{jax.token = true}` argument takes one.
_tokens: dict = {}
_NO_TOKEN = np.zeros(0, np.bool_)


def compile(stablehlo_text: str, platform: str | None = None,
            host_callbacks=(), ordered: bool = False) -> Executable:
  """Compile a StableHLO module, given as MLIR text, for one device.

  `host_callbacks[i]` is the Python function that the module's custom call
  `callback_target(platform)` with `index = i` runs (autodidax.callback writes them).
  `ordered`: @main takes a token first and returns one first."""
  _, _, xc = _jax()
  platform = platform or default_platform()
  c = client(platform)
  devices, errors = xc.DeviceList((device(platform),)), []
  if host_callbacks:   # this overload takes a parsed MLIR module
    mlir, ir = _mlir()
    with mlir.make_ir_context():
      loaded = c.compile_and_load(ir.Module.parse(stablehlo_text), devices,
                                  xc.CompileOptions(),
                                  host_callbacks=[_guarded(f, errors) for f in host_callbacks])
  else:
    loaded = c.compile_and_load(stablehlo_text, devices, xc.CompileOptions())
  exe = Executable(loaded, platform, ordered)
  exe.callback_errors = errors
  return exe


# --- Host callbacks ---------------------------------------------------------------------------
# jaxlib registers an XLA FFI handler that calls back into Python: the custom
# call names the handler, its `index` picks one of the functions handed to
# `compile`. The function gets NumPy arrays and returns a tuple of them.

def callback_target(platform: str | None = None) -> str:
  device = "gpu" if (platform or default_platform()) in ("gpu", "cuda", "rocm") else "cpu"
  return f"xla_ffi_python_{device}_callback"


def _guarded(fn, errors: list):
  """`fn`, recording what it raises: XLA reports only a text, and the
  executable re-raises the callback's own error, traceback and all."""
  def call(*args):
    try:
      return fn(*args)
    except BaseException as e:
      errors.append(e)
      raise
  return call


def verify(stablehlo_text: str) -> None:
  """Parse and verify MLIR text with jaxlib's MLIR bindings; raise if invalid."""
  mlir, ir = _mlir()
  with mlir.make_ir_context():
    module = ir.Module.parse(stablehlo_text)
    if not module.operation.verify():
      raise ValueError("the StableHLO module does not verify")


# --- Many devices: per-device buffers and SPMD programs ------------------------------------
# The chapter "Many devices". An array spread over devices is, for the runtime,
# one single-device buffer per device; autodidax.sharding says which part of
# the array each one holds. An SPMD program is compiled once for all the
# devices of a mesh (XLA's partitioner splits it), and runs on all at once.

def devices(platform: str | None = None) -> list:
  """The devices of a platform's client (8 CPU devices under
  XLA_FLAGS=--xla_force_host_platform_device_count=8)."""
  return list(client(platform).local_devices())


def device_put_on(x, dev):
  """Copy a host array to one given device."""
  _, _, xc = _jax()
  x = np.asarray(x)
  return xc.batched_device_put(_jax_aval(x.shape, x.dtype), xc.SingleDeviceSharding(dev),
                               [x], [dev], enable_x64=True)


def buffer_device(buf):
  """The device a single-device buffer lives on."""
  return next(iter(buf.devices()))


class SpmdExecutable:
  """A program compiled for several devices: partition k runs on `devices[k]`."""

  def __init__(self, loaded, devs, platform: str):
    _, _, xc = _jax()
    self._loaded, self.devices, self.platform = loaded, devs, platform
    dl = tuple(devs)
    shardings = loaded.get_parameter_shardings()   # None for a program on one device
    self._in_shardings = ([xc.GSPMDSharding(dl, s) for s in shardings] if shardings is not None
                          else None)

  def execute(self, args: list, in_avals: list) -> list:
    """`args[i]` holds argument i's buffers, one per device, in the program's
    device order (each the part of the array that device computes with);
    the results come back the same way: per output, a buffer per device."""
    _, _, xc = _jax()
    shardings = self._in_shardings or [xc.SingleDeviceSharding(self.devices[0])] * len(args)
    arrays = [xc.ArrayImpl(_jax_aval(tuple(a.shape), np.dtype(a.dtype)), s, list(bufs),
                           True, True)
              for bufs, a, s in zip(args, in_avals, shardings)]
    results = self._loaded.execute_sharded(arrays)
    return [list(outs) for outs in results.disassemble_into_single_device_arrays()]

  def output_tiles(self) -> list:
    """How XLA laid out each output: (tile counts per dimension, the device
    positions in tile order, whether the last tile dimension is replication)."""
    _, _, xc = _jax()
    out = []
    for op in self._loaded.get_output_shardings() or []:
      s = xc.HloSharding.from_proto(op)
      if s.is_replicated():
        out.append(((), list(range(len(self.devices))), False))
      else:
        out.append((list(s.tile_assignment_dimensions()), list(s.tile_assignment_devices()),
                    bool(s.replicate_on_last_tile_dim())))
    return out

  def hlo_text(self) -> str:
    """The partitioned HLO: the program each device runs, collectives included."""
    return self._loaded.hlo_modules()[0].to_string()

  def cost_analysis(self) -> dict:
    costs = self._loaded.cost_analysis()
    return dict(costs[0] if isinstance(costs, (list, tuple)) else costs)


def compile_spmd(stablehlo_text: str, devs: list, platform: str | None = None) -> SpmdExecutable:
  """Compile a StableHLO module with sharding annotations (Shardy's `sdy`
  dialect) for `devs`, one partition per device: XLA's SPMD partitioner
  turns it into the program every device runs."""
  _, _, xc = _jax()
  platform = platform or default_platform()
  options = xc.CompileOptions()
  options.num_replicas, options.num_partitions = 1, len(devs)
  build = options.executable_build_options
  build.use_spmd_partitioning = True
  build.use_shardy_partitioner = True
  options.device_assignment = xc.DeviceAssignment.create(
      np.array([[d.id for d in devs]]))
  loaded = client(platform).compile_and_load(stablehlo_text, xc.DeviceList(tuple(devs)),
                                             options)
  return SpmdExecutable(loaded, devs, platform)
