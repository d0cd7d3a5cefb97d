"""`make lab` starts JupyterLab for everyone: as root (Docker, cloud machines),
where it adds --allow-root with a note, and as a user; LAB_ARGS passes flags on.

One test really starts it, as whoever runs the tests, sees it answer on
localhost and stops it; the other user's case is a dry run (scripts/lab.sh
prints its command) under an `id` that says the other uid.
"""
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTE = "adding --allow-root"
# -o: don't rebuild .venv here, even if pyproject.toml is newer than its stamp.
MAKE = ["make", "--no-print-directory", "-o", ".venv/.installed", "lab"]


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _env(tmp_path, **extra):
  env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "PYTEST"))}
  # Jupyter's runtime and config files go to the test's folder, not ~.
  env.update(JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
             JUPYTER_CONFIG_DIR=str(tmp_path / "config"), **extra)
  return env


def test_make_lab_starts_and_listens(tmp_path):
  """It answers, and its file browser lists the notebooks but not the solutions (source/)
  nor the grader (coursekit/)."""
  port, token = _free_port(), "lab-test-token"
  args = (f"--no-browser --ip=127.0.0.1 --port={port} --port-retries=0 "
          f"--IdentityProvider.token={token}")
  proc = subprocess.Popen([*MAKE, f"LAB_ARGS={args}"], cwd=ROOT, env=_env(tmp_path),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          start_new_session=True)
  try:
    version, deadline = None, time.monotonic() + 300   # a busy machine starts it slowly
    while version is None and time.monotonic() < deadline and proc.poll() is None:
      try:   # /api answers without a token
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api", timeout=2) as r:
          version = json.load(r).get("version")
      except OSError:
        time.sleep(0.5)
    assert version, f"JupyterLab did not answer on port {port}"
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents/?token={token}",
                                timeout=30) as r:
      listed = {item["name"] for item in json.load(r)["content"]}
    assert "part1.ipynb" in listed and not listed & {"source", "coursekit"}, listed
  finally:
    if proc.poll() is None:
      os.killpg(proc.pid, signal.SIGTERM)   # make, bash and jupyter: one session of ours
    out, _ = proc.communicate(timeout=60)
  assert (NOTE in out) == (os.geteuid() == 0), out
  assert str(port) in out, out


@pytest.mark.parametrize("uid", ["0", "1000"])
def test_make_lab_adds_allow_root_only_for_root(tmp_path, uid):
  shim = tmp_path / "bin"
  shim.mkdir()
  (shim / "id").write_text(f"#!/bin/sh\necho {uid}\n")
  (shim / "id").chmod(0o755)
  env = _env(tmp_path, LAB_DRY_RUN="1", PATH=f"{shim}{os.pathsep}{os.environ['PATH']}")
  proc = subprocess.run([*MAKE, "LAB_ARGS=--no-browser --port=8899"], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=60)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  command = proc.stdout.strip().splitlines()[-1].split()
  assert command[:3] == [".venv/bin/jupyter", "lab", "exercises"]
  assert " ".join(command[3:5]) == "--ContentsManager.hide_globs=['source', 'coursekit',"
  assert "--ServerApp.jpserver_extensions=coursekit.learner.lab=True" in command   # the book's links
  hidden = len(command) - 2 - (uid == "0")   # the hide_globs list is several words
  assert command[hidden:] == (["--allow-root"] if uid == "0" else []) + ["--no-browser",
                                                                          "--port=8899"]
  assert (NOTE in proc.stderr) == (uid == "0"), proc.stderr


def test_the_lab_shows_book_links_at_its_copy_of_the_book_and_saves_them_as_they_were(tmp_path):
  """coursekit.learner.lab's contents manager: a notebook opened in the lab links the book the
  lab serves (under its base URL); saved, its file is as before, links and all."""
  import asyncio
  from concurrent.futures import ThreadPoolExecutor

  import nbformat
  from coursekit.learner import lab
  from traitlets import Unicode
  from traitlets.config import Configurable

  class Server(Configurable):
    base_url = Unicode("/user/ada/")

  nb = "part1.ipynb"
  (tmp_path / nb).write_text((ROOT / "exercises" / nb).read_text())
  manager = lab.BookLinksContentsManager(parent=Server(), root_dir=str(tmp_path))

  async def round_trip():
    model = await manager.get(nb)
    text = json.dumps(model["content"])
    await manager.save({"type": "notebook", "content": json.loads(text)}, "saved.ipynb")
    return text

  with ThreadPoolExecutor(1) as pool:   # an asyncio loop of its own
    shown = pool.submit(asyncio.run, round_trip()).result()
  assert "](../book/" not in shown and "](/user/ada/autodidax/book/part1_interpreters.html#" in shown
  before, after = (nbformat.read(tmp_path / f, as_version=4) for f in (nb, "saved.ipynb"))
  assert [c.source for c in after.cells] == [c.source for c in before.cells]
