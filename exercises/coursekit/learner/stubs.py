"""Build the learners' stub notebooks from the sources in exercises/source/.

    python -m coursekit.stubs                  # (re)write exercises/<name>.ipynb
    python -m coursekit.stubs --check          # exit 1 if a committed stub is stale
                                               # (records: within their tolerances)
    python -m coursekit.stubs --solutions DIR  # also write the executed solutions

For each `source/<name>.md` (a jupytext MyST notebook; `.ipynb` works too):

1. read it, give every cell a stable id (an explicit `id` in its metadata, or
   one derived from its content) and check the exercise metadata: each
   exercise has a `statement` (with a `title`), `solution` cell(s) with
   `### BEGIN SOLUTION` / `### END SOLUTION` blocks, and one `check` cell
   marked `# NBVAL_CHECK_OUTPUT`;
2. execute it with its solutions (the reference notebook), failing loudly if
   any cell raises or a check cell prints anything but its summary to stdout;
   its check cells store their probes' records at seed 0, which become
   `coursekit/learner/expected/<name>.json` (what the stub's check cells compare with,
   secret answers left out), after checking that each probe's records change
   with the seed (else they'd answer the exercise at any seed). Records are
   compared with their tolerances, never byte for byte: a rebuild on a CPU
   whose XLA rounds differently in the last bits is up to date;
3. make the stub: each solution block becomes `raise NotImplementedError(...)`,
   each statement's metadata lists what the exercise removes (`removes`),
   check cells keep the reference run's outputs (nbval compares against them),
   every other output is cleared, and the JSON is written deterministically.
"""
from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import re
import sys
import tempfile
from pathlib import Path

import nbformat

EXERCISES = Path(__file__).resolve().parents[2]   # the exercises/ folder
SOURCE = EXERCISES / "source"
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
CHECK_MARKER = "# NBVAL_CHECK_OUTPUT"
ROLES = ("statement", "solution", "check")
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
ID_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


class SourceError(Exception):
  """The exercise source is malformed, or its reference run failed."""


# --- Reading and validating a source -------------------------------------------------

def sources() -> list[Path]:
  return sorted(p for p in SOURCE.iterdir()
                if p.suffix in (".md", ".ipynb") and not p.name.startswith("."))


def read_source(path: Path) -> nbformat.NotebookNode:
  """The source as a normalized notebook: stable ids, exercise metadata checked."""
  if path.suffix == ".md":
    import jupytext
    nb = jupytext.read(path)
  else:
    nb = nbformat.read(path, as_version=4)
  name = path.stem
  nb.nbformat, nb.nbformat_minor = 4, 5
  nb.metadata = nbformat.from_dict({
      "kernelspec": KERNELSPEC, "language_info": {"name": "python"},
      "coursekit": {"part": name}})
  seen: set[str] = set()
  for cell in nb.cells:   # explicit ids first, so derived ones can avoid them
    explicit = cell.metadata.pop("id", None)
    if explicit is not None:
      if not ID_RE.match(str(explicit)) or explicit in seen:
        raise SourceError(f"{path.name}: bad or repeated cell id {explicit!r}")
      seen.add(explicit)
    cell.id = explicit
  for cell in nb.cells:
    if cell.id is None:
      digest = hashlib.sha1((cell.cell_type + cell.source).encode()).hexdigest()
      cell_id, n = f"{name}-{digest[:8]}", 1
      while cell_id in seen:
        n += 1
        cell_id = f"{name}-{digest[:8]}-{n}"
      seen.add(cell_id)
      cell.id = cell_id
    if cell.cell_type == "code":
      cell.outputs, cell.execution_count = [], None
    cell.metadata.pop("execution", None)
  exercises(nb, where=path.name)   # validates
  return nb


def exercises(nb, where="notebook") -> dict[str, dict]:
  """{exercise: {"title": str, "statement": cell, "solution": [cells], "check": cell}}."""
  out: dict[str, dict] = {}
  for cell in nb.cells:
    ex, role = cell.metadata.get("exercise"), cell.metadata.get("role")
    if ex is None and role is None:
      continue
    ex = str(ex)
    if role not in ROLES:
      raise SourceError(f"{where}: cell {cell.id}: role {role!r} is not one of {ROLES}")
    entry = out.setdefault(ex, {"solution": []})
    if role == "solution":
      if cell.cell_type != "code" or BEGIN not in cell.source:
        raise SourceError(f"{where}: solution cell {cell.id} needs a {BEGIN!r} block")
      entry["solution"].append(cell)
      continue
    if role in entry:
      raise SourceError(f"{where}: exercise {ex} has two {role} cells")
    entry[role] = cell
    if role == "statement":
      entry["title"] = cell.metadata.get("title") or ""
  for ex, entry in out.items():
    missing = [r for r in ROLES if not entry.get(r)]
    if missing or not entry["title"]:
      raise SourceError(f"{where}: exercise {ex} lacks {missing or 'a title'}")
    check = entry["check"]
    if check.cell_type != "code" or CHECK_MARKER not in check.source:
      raise SourceError(f"{where}: check cell {check.id} must be code with {CHECK_MARKER!r}")
  return out


# --- Stubbing solutions --------------------------------------------------------------

def strip_solutions(source: str, message: str) -> str:
  """Replace each BEGIN/END SOLUTION block with a `raise` at the block's indent."""
  out, inside = [], False
  for line in source.splitlines():
    marker = line.strip()
    if marker.startswith(BEGIN):
      if inside:
        raise SourceError(f"nested {BEGIN!r} in:\n{source}")
      inside = True
      indent = line[:len(line) - len(line.lstrip())]
      out.append(f"{indent}raise NotImplementedError({json.dumps(message)})")
    elif marker.startswith(END):
      if not inside:
        raise SourceError(f"{END!r} without {BEGIN!r} in:\n{source}")
      inside = False
    elif not inside:
      out.append(line)
  if inside:
    raise SourceError(f"{BEGIN!r} without {END!r} in:\n{source}")
  return "\n".join(out)


# --- Executing the reference ----------------------------------------------------------

def execute(nb, timeout=300) -> nbformat.NotebookNode:
  """Run a copy of `nb` in a fresh python3 kernel in exercises/; raise on any error."""
  from nbclient import NotebookClient
  from nbclient.exceptions import CellExecutionError
  from jupyter_client.manager import AsyncKernelManager
  nb = copy.deepcopy(nb)
  # Unix sockets in a fresh folder, not TCP ports: kernels started at once by
  # parallel test workers could pick the same port, and one then dies at start.
  with tempfile.TemporaryDirectory(prefix="coursekit-kernel-") as sockets:
    km = AsyncKernelManager(kernel_name="python3", transport="ipc",
                            connection_file=os.path.join(sockets, "kernel.json"))
    client = NotebookClient(nb, km=km, timeout=timeout, startup_timeout=120,
                            record_timing=False,
                            resources={"metadata": {"path": str(EXERCISES)}})
    try:
      client.execute()
    except CellExecutionError as e:
      raise SourceError(f"the reference notebook failed:\n{e}") from None
  return nb


def coalesce_streams(outputs: list) -> list:
  """Join consecutive stdout (or stderr) chunks: a kernel under load may send
  one print as several stream messages. nbval compares them joined too."""
  merged = []
  for out in outputs:
    if (out.output_type == "stream" and merged and merged[-1].output_type == "stream"
        and merged[-1].name == out.name):
      merged[-1].text += out.text
    else:
      merged.append(out)
  return merged


def reference(path: Path) -> tuple[nbformat.NotebookNode, str]:
  """The executed reference notebook (solutions kept) of one source, and its
  probes' records at seed 0 (JSON: what the stub's check cells compare with)."""
  with tempfile.TemporaryDirectory() as tmp:
    old = os.environ.get("COURSEKIT_RECORD")
    os.environ["COURSEKIT_RECORD"] = tmp   # the kernel's check cells store, not compare
    try:
      nb = execute(read_source(path))
    finally:
      if old is None:
        os.environ.pop("COURSEKIT_RECORD")
      else:
        os.environ["COURSEKIT_RECORD"] = old
    recorded = Path(tmp) / f"{path.stem}.json"
    expected = recorded.read_text() if recorded.exists() else ""
  for cell in nb.cells:
    if cell.cell_type == "code":
      cell.outputs = coalesce_streams(cell.outputs)
  for ex, entry in exercises(nb, path.name).items():
    outs = entry["check"].outputs
    if not (len(outs) == 1 and outs[0].output_type == "stream"
            and outs[0].name == "stdout" and outs[0].text.strip()):
      raise SourceError(f"{path.name}: check cell of exercise {ex} should print one "
                        f"summary to stdout and nothing else; it gave {outs}")
  return normalized(nb), expected


def normalized(nb) -> nbformat.NotebookNode:
  """Execution counts 1, 2, ... over the code cells that have outputs; no
  timings, and no kernel versions (which vary between machines)."""
  nb.metadata["language_info"] = {"name": "python"}
  n = 0
  for cell in nb.cells:
    cell.metadata.pop("execution", None)
    if cell.cell_type == "code":
      n += 1
      cell.execution_count = n if cell.outputs else None
  return nb


_HINT = re.compile(r"^\*(Hints?):\*\s*", re.M)


def fold_hints(markdown: str) -> str:
  """Fold a statement's hints away: from a `*Hint:*` (or `*Hints:*`) line to
  the end of the cell becomes a collapsed <details> block, which JupyterLab
  shows as a toggle, so nobody reads the hint before wanting to."""
  m = _HINT.search(markdown)
  if not m:
    return markdown
  before, hint = markdown[:m.start()], markdown[m.end():].strip()
  hint = hint[:1].upper() + hint[1:]
  return (f"{before}<details><summary><b>{m.group(1)}</b> (click to show)</summary>\n\n"
          f"{hint}\n\n</details>\n")


_BOOK_LINK = re.compile(r"\]\(\.\./book/([\w-]+)\.md(#[\w-]+)?\)")


def site_url() -> str:
  """Where the book's pages are, from a notebook: `html.baseurl` in _config.yml
  once the course is published, else `../` (the site serves the notebooks
  from exercises/, beside book/)."""
  import yaml
  config = EXERCISES.parent / "_config.yml"
  url = (yaml.safe_load(config.read_text()) or {}).get("html", {}).get("baseurl") \
      if config.exists() else None
  return url.rstrip("/") + "/" if url else "../"


def book_links(markdown: str, site: str) -> str:
  """A source links a chapter as its file, `../book/part1_interpreters.md#section`
  (a real path in the repository); the learner's notebook links its page on
  the site, `{site}book/part1_interpreters.html#section`."""
  return _BOOK_LINK.sub(lambda m: f"]({site}book/{m.group(1)}.html{m.group(2) or ''})", markdown)


def make_stub(ref, part: str) -> nbformat.NotebookNode:
  """The learner's notebook, from an executed reference notebook. Each statement's
  metadata names what the exercise removes from the grader's learner edition."""
  from .probe import spec
  stub = copy.deepcopy(ref)
  exs = exercises(stub)
  titles = {ex: entry["title"] for ex, entry in exs.items()}
  site = site_url()
  for cell in stub.cells:
    role = cell.metadata.get("role")
    if role == "statement":
      cell.metadata["removes"] = sorted(spec(part, str(cell.metadata["exercise"])).removes)
    if cell.cell_type == "markdown":
      cell.source = fold_hints(book_links(cell.source, site))
    if cell.cell_type != "code":
      continue
    if role == "check":
      cell.metadata.update(editable=False, deletable=False)   # JupyterLab honours these
      continue
    cell.outputs, cell.execution_count = [], None
    if role == "solution":
      ex = cell.metadata["exercise"]
      cell.source = strip_solutions(cell.source, f"Exercise {ex}: {titles[ex]}")
  return normalized(stub)


def dumps(nb) -> str:
  """Deterministic JSON: sorted keys, one-space indent, trailing newline."""
  nbformat.validate(nb)
  text = nbformat.writes(nb, version=4)
  return text if text.endswith("\n") else text + "\n"


def build(path: Path) -> tuple[nbformat.NotebookNode, str, str]:
  """(executed reference notebook, stub JSON, expected records JSON) for one source."""
  ref, expected = reference(path)
  return ref, dumps(make_stub(ref, path.stem)), expected


def same_records(old: str, new: str) -> bool:
  """Whether two expected-records files agree as the checks compare them: same exercises,
  labels, tolerances and structure, values within the records' own tolerances (both
  ways). XLA's float results differ in their last bits between CPUs, so a rebuild on
  another machine is up to date, and `make exercises` leaves the file as it is."""
  from .probe import compare
  try:
    a, b = json.loads(old), json.loads(new)
  except ValueError:
    return False
  if not (isinstance(a, dict) and isinstance(b, dict)) or sorted(a) != sorted(b):
    return False
  for ex, want in b.items():
    got = a[ex]
    if not isinstance(got, list) or len(got) != len(want):
      return False
    meta = lambda r: ({k: v for k, v in r.items() if k not in ("value", "detail")}   # a
                      if isinstance(r, dict) else r)   # run's detail (an error's words) isn't compared
    if [meta(r) for r in got] != [meta(r) for r in want]:
      return False
    if not (compare(got, want).passed and compare(want, got).passed):
      return False
  return True


def stub_path(source: Path) -> Path:
  return EXERCISES / f"{source.stem}.ipynb"


def expected_path(source: Path) -> Path:
  return Path(__file__).resolve().parent / "expected" / f"{source.stem}.json"


# --- Command line ----------------------------------------------------------------------

def main(argv=None) -> int:
  ap = argparse.ArgumentParser(prog="python -m coursekit.stubs", description=__doc__.split("\n")[0])
  ap.add_argument("names", nargs="*", help="sources to build (default: all), e.g. part1")
  ap.add_argument("--check", action="store_true",
                  help="don't write stubs; exit 1 if a committed one differs from a rebuild")
  ap.add_argument("--solutions", metavar="DIR", type=Path,
                  help="also write the executed reference notebooks into DIR")
  args = ap.parse_args(argv)

  paths = sources()
  if args.names:
    paths = [p for p in paths if p.stem in args.names]
    unknown = set(args.names) - {p.stem for p in paths}
    if unknown:
      ap.error(f"no source for {sorted(unknown)} in {SOURCE}")
  stale = []
  for path in paths:
    try:
      ref, stub, expected = build(path)
    except SourceError as e:
      print(f"error: {path.name}: {e}", file=sys.stderr)
      return 1
    if args.solutions:
      args.solutions.mkdir(parents=True, exist_ok=True)
      (args.solutions / stub_path(path).name).write_text(dumps(ref))
    for target, text, same in ((stub_path(path), stub, str.__eq__),
                               (expected_path(path), expected, same_records)):
      old = target.read_text() if target.exists() else None
      name = target.relative_to(EXERCISES.parent)
      fresh = old is not None and same(old, text)
      if args.check:
        if not fresh:
          stale.append(target)
        print(f"{name}: {'up to date' if fresh else 'STALE'}")
      elif not fresh:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        print(f"wrote {name}")
      else:
        print(f"{name}: unchanged")
  if stale:
    print("stale stubs: run `make exercises` and commit them", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
