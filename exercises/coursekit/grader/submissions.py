"""Finding the submitted notebooks, reading them safely, and telling whose they are.

`collect` lists every notebook under a folder or in a zip without reading
any: a `Submission` reads its bytes when it is graded (at most `MAX_FILE`),
so memory holds a few notebooks at a time, whatever the batch. What can't be
graded still gets a row that says why: a file over the size limit, a symbolic
link (never followed: it could point anywhere on the grader's machine),
something that isn't a regular file. Names that aren't UTF-8 are shown with
escapes (`\\xff`).

`read_notebook` parses one notebook into the little the grader needs (code
cells, cell ids and exercise metadata, the `coursekit` metadata), after a
cheap count that refuses JSON whose parse would take more memory than a
notebook needs.
"""
from __future__ import annotations

import json
import os
import re
import stat
import threading
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Callable

import nbformat

MAX_FILE = 16 << 20          # largest notebook read, bytes
MAX_TOTAL = 1 << 30          # all notebooks of one zip or folder, bytes (read one at a time)
MAX_CODE = 2 << 20           # a notebook's code cells, bytes
MAX_VALUES = 1_000_000       # JSON values in one notebook (each costs memory to parse)
MAX_MEMBERS = 50_000         # entries of a zip (its directory is read whole)


def printable(text) -> str:
  """`text` with bytes that aren't UTF-8 (file names) and control characters escaped,
  so that it can be written anywhere and shown in a terminal."""
  text = str(text)
  try:
    raw = text.encode("utf-8", "surrogateescape")
  except UnicodeEncodeError:
    raw = text.encode("utf-8", "surrogatepass")
  text = raw.decode("utf-8", "backslashreplace")
  return "".join(c if c.isprintable() or c in " " else c.encode("unicode_escape").decode()
                 for c in text)


@dataclass
class Submission:
  label: str                 # path inside the folder or zip, posix, printable
  data: bytes = b""          # its bytes, when given (tests); else `reader` reads them
  folder: str | None = None  # the per-student subfolder, if any
  problem: str = ""          # why it can't be read, if it can't
  reader: Callable[[], bytes] | None = field(default=None, repr=False)

  def load(self) -> bytes:
    return self.reader() if self.reader is not None else self.data


def _is_notebook(name: str) -> bool:
  return name.lower().endswith(".ipynb")


def _hidden(parts) -> bool:
  return any(p.startswith(".") or p == "__MACOSX" for p in parts)


class _Zip:
  """One zip file, read member by member by the graders' threads."""

  def __init__(self, path: Path):
    self.path, self.lock, self.z = path, threading.Lock(), None

  def members(self) -> list[zipfile.ZipInfo]:
    with open(self.path, "rb") as f:
      end = zipfile._EndRecData(f)
    if end and end[zipfile._ECD_ENTRIES_TOTAL] > MAX_MEMBERS:
      raise ValueError(f"{self.path.name} has {end[zipfile._ECD_ENTRIES_TOTAL]} entries: over "
                       f"the grader's limit of {MAX_MEMBERS}")
    self.z = zipfile.ZipFile(self.path)
    return self.z.infolist()

  def read(self, info) -> bytes:   # at most MAX_FILE + 1 bytes, whatever the header claims
    with self.lock, self.z.open(info) as f:
      return f.read(MAX_FILE + 1)


def collect(src: Path) -> list[Submission]:
  """Every notebook under `src` (a folder or a .zip), sorted by path; nothing is read
  yet, nothing is extracted to disk."""
  found: dict[str, Submission] = {}
  total = 0

  def add(label, size, reader=None, problem=""):
    nonlocal total
    label = printable(label)
    n, base = 2, label
    while label in found:   # the same name twice in a zip: keep both
      stem = base[:-len(".ipynb")] if _is_notebook(base) else base
      label = f"{stem} (copy {n}){base[len(stem):]}"
      n += 1
    if not problem and size > MAX_FILE:
      problem = (f"the file is {size / 2**20:.0f} MiB: over the {MAX_FILE >> 20} MiB limit "
                 "for a notebook")
    elif not problem and total + size > MAX_TOTAL:
      problem = "not read: the submissions exceed the grader's total size limit"
    if not problem:
      total += size
    found[label] = Submission(label, problem=problem, reader=None if problem else reader)

  if src.is_file() and zipfile.is_zipfile(src):
    z = _Zip(src)
    for info in z.members():
      parts = PurePosixPath(info.filename).parts
      if info.is_dir() or _hidden(parts) or ".." in parts or not parts:
        continue
      mode = info.external_attr >> 16
      if stat.S_ISLNK(mode):
        add("/".join(parts), 0, problem="skipped: a symbolic link (the grader reads only "
            "regular files)")
      elif _is_notebook(info.filename):
        add("/".join(parts), info.file_size, lambda info=info: _capped(z.read(info)))
  elif src.is_file() and _is_notebook(src.name):
    add(src.name, src.stat().st_size, lambda: _read_file(src))
  elif src.is_dir():
    for root, dirs, files in os.walk(src):
      rel_root = Path(root).relative_to(src)
      dirs[:] = sorted(d for d in dirs if not _hidden([d]))
      for name in sorted(dirs + files):
        path = Path(root) / name
        rel = (rel_root / name).as_posix()
        if _hidden(Path(rel).parts):
          continue
        try:
          st = path.lstat()
        except OSError as e:
          add(rel, 0, problem=f"skipped: can't read it ({type(e).__name__})")
          continue
        if stat.S_ISLNK(st.st_mode):
          if _is_notebook(name) or path.is_dir():
            add(rel, 0, problem="skipped: a symbolic link (the grader reads only regular "
                "files, never what a link points to)")
        elif name in files and _is_notebook(name):
          if stat.S_ISREG(st.st_mode):
            add(rel, st.st_size, lambda path=path: _read_file(path))
          else:
            add(rel, 0, problem="skipped: not a regular file")
  else:
    raise FileNotFoundError(f"{src} is neither a folder, a .zip file nor a notebook")
  labels = sorted(found)
  parts = [PurePosixPath(l).parts for l in labels]
  depth = 0   # a single folder around everything (a zipped folder) says nothing: drop it
  while parts and all(len(p) > depth + 1 for p in parts) and len({p[depth] for p in parts}) == 1:
    depth += 1
  subs = []
  for label, p in zip(labels, parts):
    rest = p[depth:]
    sub = found[label]
    sub.folder = rest[0] if len(rest) > 1 else None
    subs.append(sub)
  return subs


def _capped(data: bytes) -> bytes:
  if len(data) > MAX_FILE:
    raise ValueError(f"it is over the {MAX_FILE >> 20} MiB limit for a notebook")
  return data


def _read_file(path: Path) -> bytes:
  fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
  with os.fdopen(fd, "rb") as f:
    if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
      raise ValueError("not a regular file")
    return _capped(f.read(MAX_FILE + 1))


# --- Reading a notebook -------------------------------------------------------------------------

def _values(data: bytes) -> int:
  """An upper bound on the number of JSON values in `data` (what parsing costs)."""
  return data.count(b",") + data.count(b":") + data.count(b"[") + data.count(b"{") + 1


def _text(source) -> str:
  if isinstance(source, str):
    return source
  if isinstance(source, list) and all(isinstance(s, str) for s in source):
    return "".join(source)
  raise ValueError("a cell's source is not text")


_KEEP_META = ("exercise", "role", "title", "points")


def read_notebook(data: bytes) -> nbformat.NotebookNode:
  """The parts of a notebook the grader uses: every cell's type, id and exercise
  metadata, the code cells' sources, and the `coursekit` metadata. Raises ValueError
  (or UnicodeDecodeError) for what isn't a notebook."""
  if _values(data) > MAX_VALUES:
    raise ValueError(f"it holds over {MAX_VALUES:,} JSON values, more than a notebook needs")
  text = data.decode("utf-8")
  del data
  try:
    d = json.loads(text)
  except RecursionError:
    raise ValueError("its JSON is nested too deeply") from None
  if not isinstance(d, dict):
    raise ValueError("not a JSON object")
  if isinstance(d.get("nbformat"), int) and d["nbformat"] < 4:   # old notebooks: nbformat converts
    d = json.loads(nbformat.writes(nbformat.reads(text, as_version=4)))
  del text
  cells = d.get("cells")
  if not isinstance(cells, list):
    raise ValueError("no list of cells")
  out = []
  for c in cells:
    if not (isinstance(c, dict) and isinstance(c.get("cell_type"), str)):
      raise ValueError("a cell is not a notebook cell")
    meta = c.get("metadata") if isinstance(c.get("metadata"), dict) else {}
    cell = {"cell_type": c["cell_type"], "metadata": {k: meta[k] for k in _KEEP_META if k in meta},
            "source": _text(c.get("source", "")) if c["cell_type"] == "code" else ""}
    if isinstance(c.get("id"), str):
      cell["id"] = c["id"][:64]
    if c["cell_type"] == "code":
      cell.update(outputs=[], execution_count=None)
    out.append(cell)
  code = sum(len(c["source"]) for c in out)
  if code > MAX_CODE:
    raise ValueError(f"it has {code / 2**20:.1f} MiB of code: over the {MAX_CODE >> 20} MiB "
                     "limit")
  meta = d.get("metadata") if isinstance(d.get("metadata"), dict) else {}
  kit = meta.get("coursekit")
  if isinstance(kit, dict):
    kit = {k: kit[k] for k in ("part", "student") if k in kit}
  light = {"cells": out, "metadata": {"coursekit": kit} if kit is not None else {},
           "nbformat": 4, "nbformat_minor": 5}
  return nbformat.from_dict(light)


# --- Whose notebook it is -------------------------------------------------------------------------

SUFFIX = re.compile(r"[-_. ]+(part\d+|p\d+|v\d+|\d+|final|submission|copy)$", re.I)


def _one_line(text, limit) -> str:
  text = printable(" ".join(str(text).split()))
  return text if len(text) <= limit else text[:limit - 1] + "…"


def student_of(sub: Submission, nb) -> tuple[str, str]:
  """(the student, a note when the notebook's metadata names someone else). Where the
  notebook was handed in decides: its folder, else its file name. Its metadata, which the
  learner (or anyone who passed the file on) can set to anything, never does; when it
  names someone else, the note says so."""
  meta = nb.get("metadata", {}).get("coursekit", {}) if isinstance(nb, dict) else {}
  who = meta.get("student") if isinstance(meta, dict) else None
  who = _one_line(who, 64) if isinstance(who, str) and who.strip() else None
  if sub.folder:
    name, where = sub.folder, "the folder it was handed in in"
  else:
    stem = re.sub(r"\.ipynb$", "", PurePosixPath(sub.label).name, flags=re.I)
    stem = re.sub(r" \(copy \d+\)$", "", stem)
    name = stem
    while (shorter := SUFFIX.sub("", name)) != name and shorter:
      name = shorter
    name, where = name or stem, "its file name"
  note = (f"its metadata names the student {who!r}; graded as {name!r}, {where}"
          if who and who != name else "")
  return name, note
