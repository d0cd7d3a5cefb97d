"""Run the benchmarks and write benchmarks/results.md and results.json.

    python benchmarks/run.py                  # every section (make bench)
    python benchmarks/run.py --quick          # a fast, noisy smoke run
    python benchmarks/run.py --only eager_ops # one section (repeatable)
    python benchmarks/run.py --list           # the section names

A full run rewrites both results files. `--only` re-measures the sections
named and keeps the others from results.json. `--quick` only prints, unless
`--write` is given (its numbers are too noisy to publish).

To add a section: write a module here with a function `fn(ctx) -> Table`
decorated with `@harness.section(name, title)` (see eager_ops.py), and add
the module's name to SECTION_MODULES.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import harness  # noqa: E402

# Imported in order; each registers its sections. The order is results.md's.
SECTION_MODULES = ["eager_ops", "transforms", "staging", "autodiff", "grading", "exercises",
                   "jit", "remat", "many_devices", "kernels", "book"]


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--quick", action="store_true",
                      help="few, short repeats: a smoke run (doesn't write results)")
  parser.add_argument("--only", action="append", metavar="NAME",
                      help="run only this section (may be repeated)")
  parser.add_argument("--list", action="store_true", help="list the sections")
  parser.add_argument("--write", action="store_true",
                      help="write the results files even with --quick")
  parser.add_argument("--out", type=Path, default=HERE,
                      help="where results.md/.json go (default: benchmarks/)")
  args = parser.parse_args(argv)

  for mod in SECTION_MODULES:
    importlib.import_module(mod)
  sections = harness.SECTIONS
  if args.list:
    for s in sections.values():
      print(f"{s.name:16} {s.title}")
    return 0
  names = args.only or list(sections)
  unknown = [n for n in names if n not in sections]
  if unknown:
    parser.error(f"unknown section(s) {', '.join(unknown)}; "
                 f"choose from {', '.join(sections)}")

  ctx = harness.Context(quick=args.quick)
  machine = harness.machine_info()
  settings = {"quick": args.quick, "min_repeat_s": ctx.min_repeat_s,
              "repeat": ctx.repeat, "warmup_s": ctx.warmup_s,
              "statistic": "min over repeats"}
  print(f"# {harness._machine_line(machine)}", file=sys.stderr)

  measured = {}
  for name in names:
    s = sections[name]
    table = s.fn(ctx)
    measured[name] = {"title": s.title, "machine": machine, "settings": settings,
                      **table.to_json()}
    print(f"\n## {s.title}\n\n{harness.render_table(measured[name])}\n")
    if table.summary_text:
      print(table.summary_text)

  write = not args.quick or args.write
  if not write:
    print("\n(--quick: results files not written; add --write to write them)",
          file=sys.stderr)
    return 0
  json_path, md_path = args.out / "results.json", args.out / "results.md"
  old = {}
  if args.only and json_path.exists():   # keep the sections we didn't re-run
    old = json.loads(json_path.read_text()).get("sections", {})
  results = {"machine": machine, "settings": settings,
             "sections": {n: measured.get(n, old.get(n)) for n in sections
                          if n in measured or n in old}}
  args.out.mkdir(parents=True, exist_ok=True)
  json_path.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
  md_path.write_text(harness.render_markdown(results))
  print(f"\nwrote {md_path} and {json_path}", file=sys.stderr)
  if args.out == HERE:
    update_readme(results)
  return 0


README = HERE.parent / "README.md"
MARKERS = ("<!-- benchmarks:start -->", "<!-- benchmarks:end -->")


def update_readme(results: dict) -> None:
  """Put one line per section (its summary) between the README's markers."""
  if not README.exists():
    return
  text = README.read_text()
  start, end = MARKERS
  if start not in text or end not in text:
    return
  rows = ["| benchmark | result |", "|---|---|"]
  for sec in results["sections"].values():
    summary = (sec.get("summary_text") or "").replace("**Overall:**", "").strip()
    rows.append(f"| {sec['title']} | {summary.replace('|', '/')} |")
  m = results["machine"]
  table = "\n".join(rows)
  block = (f"{start}\n*Measured by `make bench` on {m.get('cpu', '?')}, "
           f"{m.get('cores', '?')} cores, {m.get('date', '?')[:10]}; details in "
           f"[benchmarks/results.md](benchmarks/results.md).*\n\n{table}\n{end}")
  head, rest = text.split(start, 1)
  README.write_text(head + block + rest.split(end, 1)[1])
  print(f"updated the summary in {README}", file=sys.stderr)


if __name__ == "__main__":
  sys.exit(main())
