"""Review flags: what a learner's code does that values can't judge.

The sandbox makes tampering pointless, but some answers are right for the
wrong reason: an exercise asks you to write a rule yourself, and the answer
calls JAX's. And some code looks around, to behave differently when graded.
The grader flags such code for a human to look at.

The scan works on the syntax tree and follows names to what they are:
`import jax.numpy as q`, `import sys as s; s.modules["jax"]`,
`getattr(sys.modules["jax"], "grad")`, `importlib.import_module("jax")`,
`__import__("jax")` and `vars(mod)["x"]` are all resolved to dotted names
(`jax.numpy`, `sys.modules`, ...) before they are judged, across the
notebook's cells (`aliases`). What can't be resolved (a module name built at
run time, an attribute name computed) is flagged as such. The sandbox's runner
also reports which watched modules the notebook's own code really asked for
while it ran, even when they were loaded already.
"""
from __future__ import annotations

import ast

from .sandboxed.cells import neutralize, parse

JAX = ("jax", "jaxlib", "_jax")   # a name component that reaches JAX
RISKY = {"importlib": "uses importlib (dynamic imports)", "ctypes": "uses ctypes",
         "subprocess": "runs other programs", "gc": "uses gc", "inspect": "uses inspect"}
DYNAMIC = {"__import__": "imports a module dynamically",
           "importlib.import_module": "imports a module dynamically",
           "builtins.__import__": "imports a module dynamically",
           "exec": "runs code built at run time", "eval": "evaluates code built at run time",
           "compile": "compiles code at run time"}
# Looking at the machine (to tell the grader's sandbox from a notebook), or reaching past
# the interpreter (file descriptors, other processes).
MACHINE = {"os.environ", "os.getenv", "os.environb", "os.getuid", "os.geteuid", "os.getgid",
           "os.getegid", "os.getpid", "os.getppid", "os.getlogin", "os.uname", "os.getcwd",
           "os.listdir", "os.scandir", "os.walk", "os.stat", "os.lstat", "os.access",
           "os.path.exists", "os.path.lexists", "os.path.isdir", "os.path.isfile",
           "os.path.islink", "os.path.ismount", "sys.argv", "sys.orig_argv", "sys.path",
           "sys.executable", "sys.prefix", "sys.base_prefix", "sys._getframe", "socket",
           "platform", "getpass", "pwd", "glob", "resource", "shutil.which", "os.cpu_count",
           "os.sched_getaffinity", "os.write", "os.fdopen", "os.dup", "os.dup2", "os.open",
           "os._exit", "os.kill", "os.fork", "os.setsid", "signal", "open", "io.open",
           "pathlib.Path", "pathlib.PosixPath"}
# Looking into running code: frames and tracebacks (up to the grader's frames), and functions'
# insides (a module's globals through any of its functions, a closure's cells, defaults).
INTROSPECTION = {"tb_frame": "frames", "f_back": "frames", "f_globals": "frames",
                 "f_locals": "frames", "f_code": "frames", "gi_frame": "frames",
                 "cr_frame": "frames", "ag_frame": "frames", "tb_next": "tracebacks",
                 "__traceback__": "tracebacks", "__globals__": "a function's module globals",
                 "__closure__": "a function's closure", "__defaults__": "a function's defaults",
                 "__kwdefaults__": "a function's defaults", "__code__": "a function's code",
                 "__builtins__": "the builtins", "cell_contents": "a function's closure",
                 "__subclasses__": "every class's subclasses", "__self__": "a method's object"}
GRADER = ("coursekit.probe", "coursekit.runner", "coursekit.answers", "coursekit.grade",
          "coursekit.sandbox", "coursekit.edition", "coursekit.definitions",
          "coursekit.learner.probe", "coursekit.learner.answers", "coursekit.learner.probes")


def aliases(sources) -> dict[str, str]:
  """{name: dotted module path} that the import statements of `sources` bind."""
  out = {}
  for source in sources:
    tree = parse(source)
    if isinstance(tree, Exception):
      continue
    for node in ast.walk(tree):
      if isinstance(node, ast.Import):
        for a in node.names:
          out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
      elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
        for a in node.names:
          if a.name != "*":
            out[a.asname or a.name] = f"{node.module}.{a.name}"
  return out


def _const(node) -> str | None:
  return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


class _Scanner:
  def __init__(self, names):
    self.names, self.found, self.memo = names, set(), {}

  def prepare(self, tree):
    """What every node of `tree` names, children first (so no walk recurses, however deep
    the code): `dotted` then only looks its answers up."""
    order, stack = [], [tree]
    while stack:
      n = stack.pop()
      order.append(n)
      stack.extend(ast.iter_child_nodes(n))
    for n in reversed(order):
      if isinstance(n, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)):
        self.memo[id(n)] = self._dotted(n)

  def dotted(self, node) -> str | None:
    """What `node` names, as a dotted path (None if it can't be told)."""
    return self.memo[id(node)] if id(node) in self.memo else self._dotted(node)

  def _dotted(self, node) -> str | None:
    if isinstance(node, ast.Name):
      return self.names.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
      base = self.dotted(node.value)
      return f"{base}.{node.attr}" if base else None
    if isinstance(node, ast.Subscript):
      key, base = _const(node.slice), self.dotted(node.value)
      if base == "sys.modules":
        return key if key else self.flag("looks up sys.modules by a computed name")
      if isinstance(node.value, ast.Call) and self.dotted(node.value.func) == "vars" \
          and node.value.args:
        inner = self.dotted(node.value.args[0])
        return f"{inner}.{key}" if inner and key else None
      if base and base.endswith(".__dict__") and key:
        return f"{base[:-len('.__dict__')]}.{key}"
      if base and base.endswith(".__globals__") and key:   # f.__globals__["_jax"]: a module's global
        return f"{base.rsplit('.', 2)[0]}.{key}"
      return None
    if isinstance(node, ast.Call):
      fn = self.dotted(node.func)
      first = node.args[0] if node.args else None
      if fn in ("getattr",) and len(node.args) >= 2:
        name, base = _const(node.args[1]), self.dotted(node.args[0])
        if name is None:
          return self.flag("looks up attributes by computed names (getattr)")
        return f"{base}.{name}" if base else None
      if fn in ("__import__", "importlib.import_module", "builtins.__import__") and first:
        name = _const(first)
        return name if name else self.flag("imports a module whose name is computed")
      if fn == "sys.modules.get" and first:
        return _const(first) or self.flag("looks up sys.modules by a computed name")
    return None

  def flag(self, text):
    self.found.add(text)
    return None

  def judge(self, d: str, called: bool):
    parts = d.split(".")
    if any(p in JAX for p in parts):
      self.flag("imports jax" if parts[0] in JAX else f"reaches jax through {d}")
    if d == "sys.modules" or d.startswith("sys.modules."):
      self.flag("reads sys.modules")
    if parts[0] in RISKY:
      self.flag(RISKY[parts[0]])
    if called and d in DYNAMIC:
      self.flag(DYNAMIC[d])
    if d in MACHINE or parts[0] in MACHINE or ".".join(parts[:2]) in MACHINE \
        or ".".join(parts[:3]) in MACHINE:
      self.flag(f"looks at the machine it runs on ({d})")
    for p in parts[1:]:
      if p in INTROSPECTION:
        self.flag(f"looks into {INTROSPECTION[p]} ({p})")
    if d.startswith(GRADER) or d == "coursekit.probes" or d.startswith("coursekit.probes."):
      self.flag(f"touches the grader's own code ({d})")

  def scan(self, tree):
    self.prepare(tree)
    for node in ast.walk(tree):
      if isinstance(node, ast.Import):
        for a in node.names:
          self.judge(a.name, False)
      elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
        self.judge(node.module, False)
        for a in node.names:
          self.judge(f"{node.module}.{a.name}", False)
      elif isinstance(node, ast.Call):
        d = self.dotted(node.func)
        if d:
          self.judge(d, True)
        r = self.dotted(node)   # getattr(...), __import__(...), import_module(...)
        if r:
          self.judge(r, False)
      elif isinstance(node, (ast.Attribute, ast.Subscript)):
        d = self.dotted(node)
        if d:
          self.judge(d, False)
        elif isinstance(node, ast.Attribute) and node.attr in INTROSPECTION:   # x().f_back
          self.flag(f"looks into {INTROSPECTION[node.attr]} ({node.attr})")
      elif isinstance(node, ast.Name) and node.id in self.names:
        self.judge(self.names[node.id], False)
      elif (text := _const(node)) and text.startswith("/") and len(text) < 200 \
          and " " not in text and text[1:2].isalpha():
        self.flag(f"mentions the path {text[:40]!r}")


def scan(source: str, names: dict | None = None) -> list[str]:
  """Sorted review flags for one cell of a learner's code; `names`: what the notebook's
  imports bind (`aliases`), so that an alias from another cell is seen through."""
  found = set()
  python = neutralize(source)
  if python != source:
    found.add("uses IPython magics or shell commands")
  tree = parse(source)
  if isinstance(tree, Exception):
    return sorted(found)
  s = _Scanner({**(names or {}), **aliases([source])})
  s.scan(tree)
  return sorted(found | s.found)
