"""The grader's in-kernel guard against tampering with the checks.

The grader imports this module in each kernel before any notebook cell runs
(`install`), calls `after_canonical()` after each of the stub's own cells
(setup, given code), and `before_check(exercise)` right before each check
cell. Between those calls the learner's code runs, in the same process.

`before_check` compares what the check cells rely on with the snapshot taken
before the learner's code ran, puts back whatever was changed, and returns
the list of changes, which the grader reports. Watched:

* every attribute of `builtins` (`print`, `isinstance`, `AssertionError`, ...);
* the attributes of the modules and classes the checks use: `coursekit.checks`
  (and `Checker`'s methods), `numpy`, `numpy.testing`, `numpy.linalg`, `math`,
  `jax`, `jax.numpy`, and `sys.modules`' entries for them;
* `sys.stdout`, `sys.stderr`, `sys.displayhook`, `sys.excepthook`, trace and
  profile hooks;
* IPython's and ipykernel's cell-running and error-reporting methods;
* the notebook's global names bound by the stub's own cells (`np`, `checks`,
  `jax`, the setup cell's imports, given functions).

So a solution cell that, say, replaces `numpy.testing.assert_allclose` or
`Checker.close`, rebinds `checks`, or swaps `print` can't change its verdict:
the check runs with the pristine objects, and the change is reported.

This is a guard, not a sandbox: code that goes after the guard itself (finds
it through `gc` or `sys.modules`, or patches objects not listed here, such
as autodidax's own modules, which exercises legitimately modify) can still
fool it. The grader's static scan flags such code for a human to review.
"""
from __future__ import annotations

import builtins
import json
import sys

WATCHED_MODULES = ("builtins", "coursekit.checks", "numpy", "numpy.testing", "numpy.linalg",
                   "math", "jax", "jax.numpy")
WATCHED_CLASSES = (("coursekit.checks", "Checker"),
                   ("IPython.core.interactiveshell", "InteractiveShell"),
                   ("ipykernel.zmqshell", "ZMQInteractiveShell"),
                   ("ipykernel.ipkernel", "IPythonKernel"),
                   ("ipykernel.kernelbase", "Kernel"))
SHELL_METHODS = ("run_cell", "run_cell_async", "run_ast_nodes", "run_code", "showtraceback",
                 "_showtraceback", "showsyntaxerror", "do_execute", "execute_request")
SYS_ATTRS = ("stdout", "stderr", "displayhook", "excepthook")
IGNORED = {"_", "__", "___", "exit", "quit", "get_ipython", "display", "__IPYTHON__",
           "dreload", "__loader__", "__spec__"}   # IPython manages these
OUTPUT_CAP = 1_000_000   # characters per stream per cell; the rest is dropped

_MISSING = object()
_modules: dict = {}      # name -> (module object, dict copy)
_classes: dict = {}      # "mod.Class" -> (class, dict copy)
_sys: dict = {}
_names: dict = {}        # notebook global -> value bound by a stub cell
_ns = None


class _CappedStream:
  """Wraps the kernel's stdout/stderr: at most OUTPUT_CAP characters per cell."""

  def __init__(self, stream, name):
    self._stream, self._name, self.count = stream, name, 0

  def write(self, text):
    n = len(text)
    if self.count >= OUTPUT_CAP:
      return n
    if self.count + n > OUTPUT_CAP:
      text = text[:OUTPUT_CAP - self.count] + (
          f"\n[... {self._name} truncated by the grader after {OUTPUT_CAP:,} characters]\n")
    self.count += n
    return self._stream.write(text)

  def __getattr__(self, name):
    return getattr(self._stream, name)


def _reset_caps(*_):
  for name in ("stdout", "stderr"):
    stream = _sys.get(name)
    if isinstance(stream, _CappedStream):
      stream.count = 0


def _snapshot_modules():
  for name in WATCHED_MODULES:
    mod = sys.modules.get(name)
    if mod is not None and name not in _modules:
      _modules[name] = (mod, dict(vars(mod)))
  for modname, clsname in WATCHED_CLASSES:
    key = f"{modname}.{clsname}"
    mod = sys.modules.get(modname)
    cls = getattr(mod, clsname, None) if mod is not None else None
    if isinstance(cls, type) and key not in _classes:
      _classes[key] = (cls, dict(vars(cls)))


def install(ns=None) -> None:
  """Take the snapshot (before any of the learner's code runs)."""
  global _ns
  _ns = ns
  for name in ("stdout", "stderr"):
    stream = getattr(sys, name)
    if not isinstance(stream, _CappedStream):
      setattr(sys, name, _CappedStream(stream, name))
  for name in SYS_ATTRS:
    _sys[name] = getattr(sys, name)
  _sys["trace"], _sys["profile"] = sys.gettrace(), sys.getprofile()
  from IPython import get_ipython
  ip = get_ipython()
  if ip is not None:
    ip.events.register("pre_run_cell", _reset_caps)
    for key, obj in (("shell", ip), ("kernel", getattr(ip, "kernel", None))):
      if obj is not None:
        inst = getattr(obj, "__dict__", {})
        _sys[key] = (obj, {m: inst.get(m, _MISSING) for m in SHELL_METHODS})
  import importlib
  for name in WATCHED_MODULES:   # before the learner's code can touch them
    try:
      importlib.import_module(name)
    except ImportError:
      pass
  _snapshot_modules()


def after_canonical() -> None:
  """Record the globals a stub cell bound, and modules it imported."""
  _snapshot_modules()
  if _ns is not None:
    for k, v in _ns.items():
      if not k.startswith("_") and k not in ("In", "Out", "get_ipython", "exit", "quit"):
        _names.setdefault(k, v)


def _restore_dict(label, target, saved, found):
  current = vars(target)
  for k, v in saved.items():
    if k in IGNORED:
      continue
    now = current.get(k, _MISSING)
    if now is not v:
      found.append(f"{label}.{k} was {'deleted' if now is _MISSING else 'replaced'}")
      setattr(target, k, v)
  for k in [k for k in current if k not in saved and k not in IGNORED]:
    if label in ("builtins",) or k in SHELL_METHODS or label.endswith("Checker"):
      found.append(f"{label}.{k} was added")
      try:
        delattr(target, k)
      except (AttributeError, TypeError):
        pass


def before_check(exercise: str) -> str:
  """Undo tampering; return a JSON list of what was found."""
  found: list[str] = []
  for name, (mod, saved) in _modules.items():
    if sys.modules.get(name) is not mod:
      found.append(f"sys.modules[{name!r}] was replaced")
      sys.modules[name] = mod
    _restore_dict(name, mod, saved, found)
  for key, (cls, saved) in _classes.items():
    _restore_dict(key, cls, saved, found)
  for obj_key in ("shell", "kernel"):
    if obj_key not in _sys:
      continue
    obj, saved = _sys[obj_key]
    inst = getattr(obj, "__dict__", {})
    for meth, old in saved.items():
      if inst.get(meth, _MISSING) is not old:
        found.append(f"the IPython {obj_key}'s {meth} was replaced")
        if old is _MISSING:
          inst.pop(meth, None)
        else:
          inst[meth] = old
  for name in SYS_ATTRS:
    if getattr(sys, name) is not _sys[name]:
      found.append(f"sys.{name} was replaced")
      setattr(sys, name, _sys[name])
  if sys.gettrace() is not _sys["trace"]:
    found.append("a trace function was set (sys.settrace)")
    sys.settrace(_sys["trace"])
  if sys.getprofile() is not _sys["profile"]:
    found.append("a profile function was set (sys.setprofile)")
    sys.setprofile(_sys["profile"])
  if _ns is not None:
    for k, v in _names.items():
      now = _ns.get(k, _MISSING)
      if now is not v:
        found.append(f"the notebook's global `{k}` (set by the setup code) was "
                     f"{'deleted' if now is _MISSING else 'rebound'}")
        _ns[k] = v
  # The builtins module object itself can't be swapped, but __builtins__ can.
  if _ns is not None and _ns.get("__builtins__") not in (builtins, vars(builtins)):
    found.append("the notebook's __builtins__ was replaced")
    _ns["__builtins__"] = builtins
  return json.dumps(sorted(set(found)))
