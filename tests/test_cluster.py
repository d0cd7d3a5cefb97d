"""Grading on a Dask cluster (`--cluster`, coursekit.grader.cluster), on localhost only.

A small mixed batch (a full, a stub and a corrupt notebook) is graded once
with `--jobs 2`, in a process that then says whether it imported anything of
Dask (it must not); the cluster's runs must give the same files: the grader's
command line against a LocalCluster of 2 worker processes, a run on the same
cluster during which a worker is killed with SIGKILL in the middle of a task,
and a hand-started scheduler whose first worker can't find bubblewrap. A
scheduler that doesn't answer is a clear error; what the cluster couldn't
grade is "not graded", never 0 points; after Ctrl-C, a rerun with the gradebook
grades only what is missing. The cluster is shared, so that its
workers start (and build their learner editions) once.
"""
import csv
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "grading"))
import grading_fixtures as F  # noqa: E402

from coursekit.grader import (chapters, cli, options, outcome, reading, report, sandbox,  # noqa: E402
                              submissions)

SEED = 11
BATCH = {"full.ipynb", "stub.ipynb", "corrupt.ipynb"}
COMMON = ["--seed", SEED, "--timeout", 30, "--memory", 1024]
DASK = [str(Path(sys.executable).with_name("dask"))]
needs_bwrap = pytest.mark.skipif(sandbox.unavailable() is not None and
                                 os.environ.get("AUTODIDAX_REQUIRE_SANDBOX") != "1",
                                 reason="no sandbox here")
pytestmark = [needs_bwrap, pytest.mark.timeout(600)]


def _env(**extra):
  env = dict(os.environ, PYTHONHASHSEED="0", **extra)
  env.pop("PYTEST_ADDOPTS", None)
  return env


def grade_cli(*args, env=None, timeout=600):
  return subprocess.run([sys.executable, "-m", "coursekit.grade", *map(str, args)], cwd=ROOT,
                        env=env or _env(), capture_output=True, text=True, timeout=timeout)


def read_rows(out: Path) -> list[dict]:
  with open(out / "grades.csv", newline="", encoding="utf-8") as f:
    return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
  subs = tmp_path_factory.mktemp("batch")
  F.write(subs, names=BATCH)
  return subs


@pytest.fixture(scope="module")
def baseline(batch, tmp_path_factory):
  """The files of `--jobs 2`, and the Dask modules that run imported."""
  out = tmp_path_factory.mktemp("jobs2")
  argv = [str(batch), "--out", str(out), "--jobs", "2", *map(str, COMMON)]
  code = ("import sys; from coursekit.grader import cli; "
          f"rc = cli.main({argv!r}); "
          "print(rc, sorted({m.split('.')[0] for m in sys.modules} & {'dask', 'distributed'}))")
  proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(),
                        capture_output=True, text=True, timeout=600)
  assert proc.stdout.strip().splitlines()[-1].startswith("0 "), proc.stdout + proc.stderr
  status = {(r["submission"], r["exercise"]): r["status"] for r in read_rows(out)}
  assert [s for (sub, _), s in status.items() if sub == "full.ipynb"] == ["pass"] * 6, status
  return out, proc.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def local2():
  from distributed import LocalCluster
  with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                    silence_logs=logging.ERROR) as lc:
    yield lc


def test_plain_grading_imports_nothing_of_dask(baseline):
  assert baseline[1] == "0 []"


def test_a_local_cluster_gives_the_same_files(batch, baseline, local2, tmp_path):
  proc = grade_cli(batch, "--out", tmp_path, "--cluster", local2.scheduler_address, *COMMON)
  assert proc.returncode == 0, proc.stderr
  for name in ("grades.csv", "grades.html"):
    assert (tmp_path / name).read_bytes() == (baseline[0] / name).read_bytes(), name


def test_local_n_needs_a_number_of_workers():
  from coursekit.grader import cluster
  for bad in ("local:0", "local:x"):
    with pytest.raises(ValueError, match="say how many workers"):
      cluster.connect(bad)


def test_a_worker_killed_mid_task_loses_nothing(batch, baseline, local2, tmp_path):
  from coursekit.grader import cluster
  stubs = chapters.load_stubs()
  opts = options.Options(timeout=30, memory_mib=1024, seed=SEED)
  g = cluster.ClusterGrader(stubs, opts, local2.scheduler_address, log=lambda text: None)

  def forget():   # the runs of this batch that each worker's grader keeps (it shares them)
    from coursekit.grader import cluster
    cluster._graders.clear()
  g.client.run(forget)   # so that the tasks run their sandboxes again, and one can be killed
  killed = []

  def kill():   # a worker busy with a submission, a moment into its sandboxes
    while not killed:
      busy = [w for w, keys in g.client.processing().items()
              if any(str(k).startswith("grade-") for k in keys)]
      if busy:
        time.sleep(0.5)
        pid = g.client.run(os.getpid, workers=busy[:1])[busy[0]]
        if any(str(k).startswith("grade-") for k in g.client.processing().get(busy[0], ())):
          os.kill(pid, signal.SIGKILL)
          killed.append(pid)
      time.sleep(0.1)
  killer = threading.Thread(target=kill, daemon=True)
  killer.start()
  handed = []
  try:
    rows = g.grade(submissions.collect(batch), on_rows=lambda p, r: handed.append((p.sub.label, r)))
  finally:
    killed.append(None)
    g.close()
  assert killed[0] is not None, "no worker was killed"
  assert g.count_not_graded == 0
  assert sorted(label for label, _ in handed) == sorted(BATCH)   # each as soon as it's done
  assert sorted(map(str, rows)) == sorted(str(r) for _, rs in handed for r in rs)
  report.write(report.sort_rows(rows, stubs), stubs, tmp_path, {"seed": SEED})
  assert (tmp_path / "grades.csv").read_bytes() == (baseline[0] / "grades.csv").read_bytes()


# The grader's command line, in a process that sends itself SIGINT as soon as it has
# recorded its first notebook: the real signal, at a moment that doesn't depend on how
# fast the machine or the cluster is.
CTRL_C_AFTER_FIRST_RECORD = """
import os, signal, sys
from coursekit.grader import cli
from coursekit.grader.gradebook import Gradebook
signal.signal(signal.SIGINT, signal.default_int_handler)   # as in a terminal: a process
# started in the background by a shell inherits SIGINT ignored, and Ctrl-C would do nothing
record = Gradebook.record
def record_then_ctrl_c(self, *args, **kwargs):
  record(self, *args, **kwargs)
  os.kill(os.getpid(), signal.SIGINT)
Gradebook.record = record_then_ctrl_c
sys.exit(cli.main(sys.argv[1:]))
"""


def test_ctrl_c_then_a_rerun_grades_only_what_is_missing(batch, baseline, local2, tmp_path):
  """Each submission is in the gradebook as soon as it is graded: after Ctrl-C, a rerun
  grades only the rest, and writes the same files."""
  from coursekit.grader.gradebook import Gradebook
  out = tmp_path / "out"
  argv = [str(batch), "--out", str(out), "--cluster", local2.scheduler_address, *COMMON]
  proc = subprocess.run([sys.executable, "-c", CTRL_C_AFTER_FIRST_RECORD, *map(str, argv)],
                        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
  assert proc.returncode != 0 and "KeyboardInterrupt" in proc.stderr, proc.stderr[-2000:]
  assert not (out / "grades.csv").exists()   # interrupted before its reports
  book = Gradebook(out / "gradebook.sqlite")
  done = book.count()[0]
  book.close()
  assert done == 1
  again = grade_cli(*argv)
  assert again.returncode == 0, again.stderr
  assert f"{done} notebooks unchanged" in again.stdout, again.stdout
  assert (out / "grades.csv").read_bytes() == (baseline[0] / "grades.csv").read_bytes()


def test_a_worker_without_bwrap_grades_nothing(batch, baseline, tmp_path):
  """The first worker has no bwrap on its PATH: alone, the run stops and says why; with a
  second worker that has, every task goes to the second."""
  file = tmp_path / "scheduler.json"
  empty = tmp_path / "bin"
  empty.mkdir()
  procs = [subprocess.Popen(DASK + ["scheduler", "--host", "127.0.0.1", "--port", "0",
                                    "--no-dashboard", "--scheduler-file", str(file)],
                            env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
  worker = DASK + ["worker", "--scheduler-file", str(file), "--nthreads", "1",
                   "--no-dashboard", "--local-directory", str(tmp_path)]
  try:
    for _ in range(300):
      if file.exists() and file.stat().st_size:
        break
      time.sleep(0.1)
    address = json.loads(file.read_text())["address"]
    procs.append(subprocess.Popen(worker, env=_env(PATH=str(empty)),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    one = tmp_path / "one"
    F.write(one, names={"full.ipynb"})
    proc = grade_cli(one, "--out", tmp_path / "alone", "--cluster", address, *COMMON)
    assert proc.returncode == 2, proc.stderr
    assert "can't sandbox" in proc.stderr and "bubblewrap" in proc.stderr, proc.stderr
    assert not (tmp_path / "alone").exists()

    procs.append(subprocess.Popen(worker, env=_env(), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL))
    from distributed import Client
    with Client(address, timeout=30) as c:
      c.wait_for_workers(2, timeout=120)
    out = tmp_path / "out"
    proc = grade_cli(one, "--out", out, "--cluster", address, *COMMON)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("can't sandbox, so it grades nothing") == 1, proc.stderr
    want = [r for r in read_rows(baseline[0]) if r["submission"] == "full.ipynb"]
    assert read_rows(out) == want and len(want) == 6
  finally:
    for p in reversed(procs):
      p.send_signal(signal.SIGINT)
    for p in reversed(procs):
      try:
        p.wait(timeout=30)
      except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def test_a_scheduler_that_does_not_answer(tmp_path, capsys):
  import distributed  # noqa: F401 (imported before the clock starts)
  from coursekit.grader.cluster import CONNECT_TIMEOUT
  with socket.socket() as s:   # a port that nothing listens on
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  F.write(tmp_path / "subs", names={"full.ipynb"})
  t = time.monotonic()
  rc = cli.main([str(tmp_path / "subs"), "--out", str(tmp_path / "out"), "--cluster",
                 f"tcp://127.0.0.1:{port}", "--seed", str(SEED)])
  assert time.monotonic() - t < CONNECT_TIMEOUT + 20
  err = capsys.readouterr().err
  assert rc == 2 and f"no Dask scheduler answered at tcp://127.0.0.1:{port}" in err, err
  assert not (tmp_path / "out").exists()


def test_what_the_cluster_could_not_grade_is_not_graded_never_0(tmp_path):
  from coursekit.grader import cluster
  from coursekit.grader.submissions import Submission
  stubs = chapters.load_stubs()
  g = cluster.ClusterGrader.__new__(cluster.ClusterGrader)   # no cluster: the rows alone
  g.stubs, g.progress, g.count_not_graded = stubs, None, 0
  sub = Submission("lost.ipynb", b"{}")
  why = "the cluster could not grade it (KilledWorker: the task killed 3 workers)"
  for part, n in ((None, 1), ("part1", len(stubs["part1"].exercises))):
    g.opts = options.Options(part=part, seed=SEED)
    rows = g.failed(reading.Parsed(sub, "lost", part, failure=why))
    assert len(rows) == n
    assert all(r["status"] == "not graded" and r["points"] == "" for r in rows)
    assert all(r["reason"].startswith(why) and "rerun" in r["reason"] for r in rows)
  records = {("part1", ex): RuntimeError("no worker") for ex in stubs["part1"].exercises}
  p = reading.Parsed(sub, "lost", "part1")
  rows += g.rows_of(p, {ex: outcome.Outcome("ok") for ex in stubs["part1"].exercises}, records)
  assert g.count_not_graded == 1 + 2 * n and all(r["status"] == "not graded" for r in rows)
  report.write(rows, stubs, tmp_path, {"seed": SEED})
  assert {r["points"] for r in read_rows(tmp_path)} == {""}
  assert "n/g" in report.tables(rows, stubs)
