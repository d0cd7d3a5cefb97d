"""The book's table of contents (_toc.yml), as the tests read it."""
from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
COURSE_CAPTION = "The course"


def _walk(entries, files: list) -> None:
  for e in entries or []:
    if "file" in e:
      files.append(e["file"])
    _walk(e.get("chapters") or e.get("sections"), files)


def _toc() -> dict:
  return yaml.safe_load((ROOT / "_toc.yml").read_text())


def toc_files() -> list[str]:
  """Every page's docname (book/part1_interpreters, ...), root first, in _toc.yml's order."""
  toc, files = _toc(), []
  files.append(toc["root"])
  _walk(toc.get("chapters"), files)
  for part in toc.get("parts") or []:
    _walk(part.get("chapters"), files)
  return files


def course_chapters() -> list[str]:
  """The docnames of the course's chapters: the part captioned "The course"."""
  parts = [p for p in _toc().get("parts") or [] if p.get("caption") == COURSE_CAPTION]
  assert parts, f"_toc.yml has no part captioned {COURSE_CAPTION!r}"
  files: list = []
  _walk(parts[0]["chapters"], files)
  return files
