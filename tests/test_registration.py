"""Every chapter is registered everywhere chapters are registered.

The chapters are the pages of _toc.yml's "The course" part. Adding one means
touching several lists; this test derives the chapter list from _toc.yml and
checks each list, so that a new chapter can't be half-registered:

- _config.yml: `adx_exercises` (the download line under its title, and the
  notebook copied into the site) and `adx_chapter_names` (the glossary's
  "See ..." links);
- its exercise notebook, exercises/<name>.ipynb, with its source, probe and
  expected records;
- book/running_exercises.md (the table of notebooks), book/intro.md (a link
  from "What you will build"), book/instructors.md (the list of notebooks)
  and README.md (the chapter table).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
import toc  # tests/toc.py: _toc.yml's pages

ROOT = Path(__file__).resolve().parents[1]


def course_chapters() -> list[str]:
  """The docnames (book/part1_interpreters, ...) of the course's chapters, in
  the order of _toc.yml."""
  return toc.course_chapters()


CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())["sphinx"]["config"]
CHAPTERS = course_chapters()


def notebook(doc: str) -> str:
  exercises = CONFIG["adx_exercises"]
  assert doc in exercises, (f"{doc} is in _toc.yml but not in _config.yml's "
                            "adx_exercises: it gets no download link")
  return exercises[doc]


def test_the_chapters_are_found():
  assert len(CHAPTERS) >= 7
  assert "book/jax_today" in CHAPTERS


def test_config_lists_exactly_the_chapters():
  assert set(CONFIG["adx_exercises"]) == set(CHAPTERS)
  assert set(CONFIG["adx_chapter_names"].values()) == set(CHAPTERS)


@pytest.mark.parametrize("doc", CHAPTERS)
def test_chapter_is_registered_everywhere(doc):
  nb = notebook(doc)
  page = Path(doc).name + ".md"
  missing = []
  if not (ROOT / "exercises" / f"{nb}.ipynb").is_file():
    missing.append(f"exercises/{nb}.ipynb")
  for f in (f"exercises/source/{nb}.md", f"exercises/coursekit/learner/probes/{nb}.py",
            f"exercises/coursekit/learner/expected/{nb}.json"):
    if not (ROOT / f).is_file():
      missing.append(f)
  places = {
      "book/running_exercises.md": f'href="../exercises/{nb}.ipynb" download',
      "README.md": f"`exercises/{nb}.ipynb`",
      "book/instructors.md": f"`{nb}.ipynb`",
      "book/intro.md": f"]({page})",
  }
  for path, needle in places.items():
    if needle not in (ROOT / path).read_text():
      missing.append(f"{path} (looked for {needle!r})")
  assert not missing, f"{doc} is missing from: " + "; ".join(missing)


def test_tables_list_chapters_in_toc_order():
  """The tables follow the order of _toc.yml, so readers find the same
  sequence everywhere."""
  order = [notebook(d) for d in CHAPTERS]
  for path, pattern in [("book/running_exercises.md", r"exercises/(\w+)\.ipynb\" download"),
                        ("README.md", r"\| `exercises/(\w+)\.ipynb` \|"),
                        ("book/instructors.md", r"\| `(\w+)\.ipynb` \|")]:
    found = [n for n in re.findall(pattern, (ROOT / path).read_text()) if n in order]
    assert found == order, f"{path}: {found}, expected {order}"
