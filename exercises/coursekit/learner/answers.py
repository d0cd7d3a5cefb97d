"""Where the learner's answers take the place of the library's own functions.

An exercise names the library functions whose code *is* its answer (`removes`
in its probe): the function it asks for, the helpers that hold its logic, and
every other function that computes the same thing (`jacrev` for `jacfwd`).
While the exercise is checked, each of them is a **slot**:

* in the grader's learner edition (`coursekit.grader.edition`), the function's
  definition is replaced, source and all, by a slot;
* in a notebook's check cell (`checks.check`), the library's function object
  gets a slot's code for the duration of the check (so aliases, closures,
  `functools.partial` and rule tables that hold the object all see it).

Both call `call` below, so the notebook and the grader give one verdict. A
slot forwards to the learner's answer of the same name in the notebook's
namespace, and refuses, with a message that names the library function and the
exercise, when

* the learner's own code calls it (a closure, `getattr`: "your answer calls
  the library's own `autodidax.api.jacfwd`"), or the answer *is* it (an import,
  an alias, `functools.partial(adx.jacfwd)`: the slot forwards to itself);
* it stands for no answer (a helper, or another function that computes the
  answer): "... uses the library's own `autodidax.api.jacrev`";
* the notebook doesn't define the answer.

Library code calling a slot (a `bind` that reaches the learner's JVP rule, a
second derivative that reaches it again) is the point, and goes through.
"""
from __future__ import annotations

import sys
import types

NAMESPACE: dict = {}   # the notebook's globals: set by the grader's runner or checks.check


class LibraryCall(NotImplementedError):
  """The answer calls (or is) a library function that the exercise asks the learner to write.
  A NotImplementedError: the exercise is not done yet, whatever else it computes."""


class NotDefined(NotImplementedError):
  """The notebook has no answer of that name."""


def _learner(frame) -> bool:
  """Whether `frame` runs the learner's own code (a notebook cell, or a function defined in one)."""
  g = frame.f_globals
  return g is NAMESPACE or g.get("__name__") == "__main__"


def message(info, kind: str) -> str:
  exercise, target, name, answers = info
  module, _, qualname = target.partition(":")
  own = ", ".join(f"`{a}`" for a in answers) or "this"
  lib = f"`{module}.{qualname}`"
  if kind == "called":
    tail = f": call your own `{name}` instead" if name and name not in answers else ""
    return (f"Exercise {exercise} asks you to write {own} yourself, but your answer calls the "
            f"library's own {lib}{tail}")
  if kind == "uses":
    return (f"Exercise {exercise} asks you to write {own} yourself, but your answer uses the "
            f"library's own {lib}, which computes it")
  return f"Exercise {exercise} asks you to write {own}: define `{name}` in your notebook"


def call(info, args, kwargs):
  """The body of every slot. `info`: (exercise, "module:qualname", answer name or None,
  the exercise's answer names)."""
  caller = sys._getframe(2)   # who called the slot: the learner's code, or a slot's `call`
  if caller is not None and (_learner(caller) or caller.f_code is call.__code__):
    raise LibraryCall(message(info, "called"))
  name = info[2]
  if not name:
    raise LibraryCall(message(info, "uses"))
  fn = NAMESPACE.get(name)
  if fn is None:
    raise NotDefined(message(info, "missing"))
  return fn(*args, **kwargs)


def slot_source(name: str, info, method: bool = False, indent: str = "", keep=()) -> str:
  """The definition of a slot named `name` (self first for a method). `keep`: free
  variables it must have (unused). `call` is found once, when the slot is defined."""
  sig = "self, *args" if method else "*args"
  fwd = "(self, *args)" if method else "args"
  hold = f"{indent}  ({', '.join(keep)},) if kwargs is None else None\n" if keep else ""
  return (f"{indent}def {name}({sig}, _slot_call=__import__('coursekit.learner.answers', "
          f"fromlist=['_']).call, **kwargs):   # Exercise {info[0]} asks you to write this\n"
          + hold + f"{indent}  return _slot_call({tuple(info)!r}, {fwd}, kwargs)\n")


def slot_code(fn: types.FunctionType, info) -> types.CodeType:
  """A slot's code, to put in place of `fn.__code__` (with `fn`'s free variables, which
  a code object must keep); `fn.__kwdefaults__` must then hold `slot_defaults()`."""
  free = fn.__code__.co_freevars
  src = ("def _outer():\n" + "".join(f"  {v} = None\n" for v in free)
         + slot_source(fn.__name__, info, indent="  ", keep=free) + f"  return {fn.__name__}\n")
  ns: dict = {}
  exec(compile(src, f"<slot of {info[1]}>", "exec"), ns)
  code = ns["_outer"]().__code__
  code = code.replace(co_name=fn.__code__.co_name, co_qualname=fn.__code__.co_qualname)
  if code.co_freevars != free:
    raise TypeError(f"can't make a slot for {info[1]}: free variables {free}")
  return code


def slot_defaults() -> dict:
  return {"_slot_call": call}
