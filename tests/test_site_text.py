"""What a reader sees in the built pages: no path of the machine that built the
site, and no traceback longer than a screenful (chapters install
book/_ext/short_tracebacks.py in their hidden setup cell)."""
import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
MAX_TRACEBACK_LINES = 12
# Absolute paths of a build machine, the virtual environment, the kernel's
# temporary cell files. The site's own links are relative, so none is legitimate.
MACHINE_PATH = re.compile(
    r"(/work/|/root/|/home/|/tmp/|/usr/lib/|site-packages|dist-packages|ipykernel_\d+|"
    + re.escape(str(ROOT)) + ")")
TRACEBACK = re.compile(r'<div class="[^"]*\boutput traceback\b[^"]*">(.*?)</div>', re.S)

pytestmark = pytest.mark.timeout(1800)  # a cold build runs every chapter


@pytest.fixture(scope="module")
def pages():
  venv_bin = Path(sys.executable).parent
  env = dict(os.environ, PATH=f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}")
  proc = subprocess.run(["bash", "scripts/build_book.sh"], cwd=ROOT, env=env,
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  if proc.returncode != 0:
    pytest.fail("the book did not build:\n" + proc.stdout[-4000:])
  found = {p.relative_to(HTML).as_posix(): p.read_text() for p in HTML.rglob("*.html")}
  assert "book/primitives.html" in found
  return found


def _text(fragment):
  return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def test_no_machine_paths(pages):
  bad = {}
  for name, page in pages.items():
    hits = {m.group(0) for m in MACHINE_PATH.finditer(_text(page))}
    hits |= {m.group(0) for m in MACHINE_PATH.finditer(page)}   # in attributes too
    if hits:
      bad[name] = sorted(hits)
  assert not bad, f"machine paths in the site: {bad}"


def test_tracebacks_are_short(pages):
  seen, long_ones = 0, []
  for name, page in pages.items():
    for m in TRACEBACK.finditer(page):
      seen += 1
      lines = _text(m.group(1)).strip("\n").splitlines()
      if len(lines) > MAX_TRACEBACK_LINES:
        long_ones.append(f"{name}: {len(lines)} lines, starting {lines[:3]}")
  assert seen >= 10, "expected the chapters' error demos"
  assert not long_ones, "\n".join(long_ones)


def test_tracebacks_end_with_the_message(pages):
  """The last line of each error demo names the exception, so the useful part
  is never what gets cut off."""
  for name, page in pages.items():
    for m in TRACEBACK.finditer(page):
      lines = _text(m.group(1)).strip("\n").splitlines()
      msg = [i for i, l in enumerate(lines) if re.match(r"[\w.]*(Error|Exception)\b", l)]
      frames = [i for i, l in enumerate(lines) if l.startswith(("Cell In[", "File "))]
      assert msg, f"{name}: a traceback without its message: {lines}"
      assert not frames or msg[-1] > frames[-1], (name, lines)
      assert all(len(l) <= 100 for l in lines), f"{name}: lines too long to read: {lines}"
