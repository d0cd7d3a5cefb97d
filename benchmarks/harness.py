"""The benchmark harness: a registry of sections, a timer, machine info, and
the renderer that turns results into `results.md`.

A section is a function `fn(ctx) -> Table`, registered with `@section(...)`.
It times its cases with `ctx.time(fn)` while iterating over them with
`ctx.progress(cases)` (a tqdm bar on stderr), and returns one `Table`: rows
of plain numbers and strings, the columns to show, and a summary line.
Everything in a Table is JSON data, so `results.md` can be re-rendered from
`results.json` alone (that is how `--only` keeps the other sections).

These are measurements, not tests: nothing here asserts on a time.
"""
from __future__ import annotations

import datetime
import gc
import os
import platform
import statistics
import sys
import timeit
from dataclasses import dataclass, field
from typing import Callable

import tqdm


# --- The registry -----------------------------------------------------------------

@dataclass
class Section:
  name: str              # what `--only NAME` selects
  title: str             # the heading in results.md
  fn: Callable           # fn(ctx) -> Table


SECTIONS: dict[str, Section] = {}   # in registration order = order in results.md


def section(name: str, title: str):
  """Register `fn(ctx) -> Table` as the benchmark section `name`."""
  def register(fn):
    if name in SECTIONS:
      raise ValueError(f"two benchmark sections named {name!r}")
    SECTIONS[name] = Section(name, title, fn)
    return fn
  return register


# --- What a section returns ------------------------------------------------------------

@dataclass
class Column:
  key: str               # the row dict's key
  header: str            # the table header in results.md
  fmt: str = "text"      # "us" (µs), "ratio" (0.42), "x" (3.1×), "met", "text"


@dataclass
class Table:
  intro: str             # what is measured and how, a paragraph of markdown
  columns: list[Column]
  rows: list[dict]       # raw numbers (µs, ratios); rendering formats them
  summary: dict = field(default_factory=dict)   # e.g. median ratio, met?
  summary_text: str = ""  # one line of markdown under the table
  notes: list[str] = field(default_factory=list)

  def to_json(self) -> dict:
    return {"intro": self.intro,
            "columns": [vars(c) for c in self.columns],
            "rows": self.rows, "summary": self.summary,
            "summary_text": self.summary_text, "notes": self.notes}


# --- Timing -------------------------------------------------------------------------------

@dataclass
class Timing:
  best_us: float         # minimum over repeats, µs per call: what we report
  median_us: float       # median over repeats, µs per call
  number: int            # calls per repeat
  repeats_us: list       # every repeat, µs per call

  def to_json(self) -> dict:
    return vars(self)


class Context:
  """Handed to each section: timing settings and the progress bar."""

  def __init__(self, quick: bool = False):
    self.quick = quick
    # Each repeat runs the callable `number` times, `number` chosen so that a
    # repeat lasts at least `min_repeat_s`; we keep the minimum over repeats.
    self.min_repeat_s = 0.005 if quick else 0.05
    self.repeat = 3 if quick else 7
    self.warmup_s = 0.002 if quick else 0.02

  def progress(self, cases, desc: str = ""):
    """Iterate over `cases` with a progress bar on stderr."""
    cases = list(cases)
    return tqdm.tqdm(cases, desc=desc, total=len(cases), file=sys.stderr,
                     leave=False, dynamic_ncols=True)

  def time(self, fn: Callable[[], object], **settings) -> Timing:
    """Time `fn()` like `timeit`; see `time_many`."""
    return self.time_many({"fn": fn}, **settings)["fn"]

  def time_many(self, fns: dict[str, Callable[[], object]], *,
                repeat: int | None = None, min_repeat_s: float | None = None,
                warmup_s: float | None = None) -> dict[str, Timing]:
    """Time each `fn()` like `timeit`: warm up, pick a loop count, repeat.

    `repeat`, `min_repeat_s` and `warmup_s` override the context's settings
    for this call only: a case that takes seconds per call can ask for fewer
    repeats (a section that does so should say it in its notes).

    The warm-up runs each `fn` for at least `warmup_s` (so caches, JAX's
    compiled executables, lazy imports, ... are all in place before we
    measure). The repeats of the different callables are interleaved (round
    robin), so that a burst of load from elsewhere on the machine hits all of
    them alike and their ratios stay meaningful. We report the *minimum* over
    repeats, as the timeit docs advise: the higher ones measure other
    processes and the garbage collector more than `fn`. The median is kept in
    results.json too.
    """
    repeat = self.repeat if repeat is None else repeat
    min_repeat_s = self.min_repeat_s if min_repeat_s is None else min_repeat_s
    warmup_s = self.warmup_s if warmup_s is None else warmup_s
    timers, numbers = {}, {}
    for key, fn in fns.items():
      fn()
      deadline = timeit.default_timer() + warmup_s
      while timeit.default_timer() < deadline:
        fn()
      timers[key] = timer = timeit.Timer(fn)   # timeit disables the GC while it times
      number = 1
      while timer.timeit(number) < min_repeat_s:   # like Timer.autorange
        number *= 2 if number < 8 else 4
      numbers[key] = number
    gc.collect()
    per_call = {key: [] for key in fns}
    for _ in range(repeat):
      for key, timer in timers.items():
        per_call[key].append(timer.timeit(numbers[key]) / numbers[key] * 1e6)
    return {key: Timing(min(ts), statistics.median(ts), numbers[key], ts)
            for key, ts in per_call.items()}


# --- Machine info -------------------------------------------------------------------------

def _cpu_model() -> str:
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or platform.machine()


def machine_info() -> dict:
  import numpy as np
  try:
    import jax
    jax_version, backend = jax.__version__, jax.default_backend()
  except ImportError:
    jax_version, backend = None, None
  try:
    cores = len(os.sched_getaffinity(0))
  except AttributeError:
    cores = os.cpu_count()
  try:   # other work on the machine makes timings noisy; say how busy it was
    load = [round(v, 2) for v in os.getloadavg()]
  except (AttributeError, OSError):
    load = None
  return {
      "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
      "cpu": _cpu_model(),
      "cores": cores,
      "os": f"{platform.system()} {platform.release()}",
      "python": platform.python_version(),
      "numpy": np.__version__,
      "jax": jax_version,
      "jax_backend": backend,
      "load_avg_1_5_15min": load,
  }


# --- Rendering ----------------------------------------------------------------------------

def _fmt(value, fmt: str) -> str:
  if value is None:
    return "–"
  if fmt == "us":
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"
  if fmt == "ratio":
    return f"{value:.2f}"
  if fmt == "s":
    return f"{value:.3g}"
  if fmt == "x":
    return f"{value:.1f}×"
  if fmt == "met":
    return "✅ yes" if value else "❌ no"
  return str(value)


def render_table(table: dict) -> str:
  cols = table["columns"]
  right = {"us", "ratio", "x"}
  lines = ["| " + " | ".join(c["header"] for c in cols) + " |",
           "|" + "|".join("---:" if c["fmt"] in right else "---" for c in cols) + "|"]
  for row in table["rows"]:
    cells = [_fmt(row.get(c["key"]), c["fmt"]) for c in cols]
    if row.get("bold"):
      cells = [f"**{c}**" if c not in ("", "–") else c for c in cells]
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines)


def _machine_line(m: dict) -> str:
  return (f"{m['cpu']}, {m['cores']} cores, Python {m['python']}, "
          f"numpy {m['numpy']}, jax {m['jax']} ({m['jax_backend']}), "
          f"{m['date']}")


def render_markdown(results: dict) -> str:
  m = results["machine"]
  out = [
      "# Benchmarks",
      "",
      "*Generated by `make bench` (`python benchmarks/run.py`); don't edit by "
      "hand. Raw numbers are in [`results.json`](results.json).*",
      "",
      "| machine | |",
      "|---|---|",
      f"| CPU | {m['cpu']} |",
      f"| cores | {m['cores']} |",
      f"| OS | {m['os']} |",
      f"| Python | {m['python']} |",
      f"| numpy | {m['numpy']} |",
      f"| jax | {m['jax']} (backend: {m['jax_backend']}) |",
      f"| date | {m['date']} |",
      f"| load average at start (1, 5, 15 min) | "
      f"{', '.join(map(str, m.get('load_avg_1_5_15min') or ['?']))} |",
      "",
      "**Method.** Each case is warmed up first (JAX's compilation is never "
      "counted), then timed like `timeit`: a loop of *n* calls, *n* chosen so "
      "that one loop lasts at least "
      f"{results['settings']['min_repeat_s'] * 1e3:g} ms, repeated "
      f"{results['settings']['repeat']} times, the repeats of the versions "
      "compared in a row interleaved; tables show the **minimum** "
      "over the repeats, in µs per call (results.json also has the median "
      "and every repeat). Ratios are ours / theirs, so below 1 means "
      "autodidax is faster. These are measurements, not tests.",
  ]
  for name, sec in results["sections"].items():
    out += ["", f"## {sec['title']}", "", sec["intro"], "",
            render_table(sec), ""]
    if sec.get("summary_text"):
      out += [sec["summary_text"], ""]
    for note in sec.get("notes", []):
      out += [f"- {note}"]
    if sec["settings"].get("quick"):
      out += ["", "> **Quick run** (`--quick`): few, short repeats; noisy numbers."]
    if sec["machine"] != m:
      out += ["", f"*Measured separately: {_machine_line(sec['machine'])}.*"]
  return "\n".join(out).rstrip() + "\n"
