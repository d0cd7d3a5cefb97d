"""A Gradescope autograder for the course's exercise notebooks.

    python -m coursekit.gradescope build [--out gradescope/autograder.zip] [--visibility V]
    make gradescope
    python -m coursekit.gradescope run [--root /autograder] [--seed N]   (what run_autograder does)

`build` writes the zip that Gradescope's "Configure Autograder" page takes: `setup.sh`
(run once when Gradescope builds the image: bubblewrap, Python 3.11 or newer, the course
package and the grader's pinned dependencies), `run_autograder` (run for each submission),
and the course itself (the library, the exercises, their stubs, sources and probes:
Gradescope keeps the autograder out of the students' sight). Gradescope unpacks the zip
into `/autograder/source` and copies `run_autograder` to `/autograder`.

`run` grades `ROOT/submission/*.ipynb` with the same grader and sandbox as `make grade`,
at a fresh seed, and writes `ROOT/results/results.json` as Gradescope's autograder
specification describes it: one test per exercise (`name`, `score`, `max_score`,
`output` in the words of the feedback pages, `visibility`) and the total `score`. It
fails closed: where the sandbox can't start, every submission gets zero points, the
learner reads that the instructor will grade it, and a hidden test tells the instructor
why. Nothing is ever graded outside the sandbox. ROOT is `/autograder` on Gradescope;
tests lay out a temporary folder the same way (`AUTOGRADER_ROOT`).
"""
from __future__ import annotations

import argparse
import json
import secrets
import sys
import zipfile
from pathlib import Path

from ..learner import probe as probes
from ..learner.stubs import EXERCISES
from . import feedback
from .chapters import load_stubs
from .options import Options, seed_arg
from .report import sort_rows
from .sandbox import SandboxUnavailable, unavailable
from .scheduling import Grader
from .submissions import collect

REPO = EXERCISES.parent
VISIBILITY = ("hidden", "after_due_date", "after_published", "visible")
# What grading needs, from requirements.txt with its pins (the book's tools are left out).
NEEDS = ("numpy", "jax", "jaxlib", "ml_dtypes", "nbformat", "tqdm", "pyyaml")
CONTENTS = ("lib", "exercises", "pyproject.toml", "_config.yml")

SETUP = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image (Ubuntu).
set -euxo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q bubblewrap util-linux python3 python3-venv
PY=python3
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  apt-get install -y -q python3.11 python3.11-venv   # Ubuntu 22.04: 3.10 is too old
  PY=python3.11
fi
"$PY" -m venv /autograder/venv
/autograder/venv/bin/python -m pip install -q -r /autograder/source/requirements-grader.txt
# The course runs from source/ (run_autograder's PYTHONPATH), never installed into the venv:
# the sandbox sees the venv, and must not find the whole library there.
# The sandbox must start here, or every submission would get zero: fail the build instead.
/autograder/venv/bin/python -c 'from coursekit.grader import sandbox; why = sandbox.unavailable(); \\
  print(why or "sandbox ok"); raise SystemExit(why is not None)'
"""

RUN = """#!/usr/bin/env bash
# Gradescope runs this for each submission. AUTOGRADER_ROOT lets a test lay out a folder
# as Gradescope does; AUTOGRADER_PYTHON, which Python has the course installed.
ROOT="${AUTOGRADER_ROOT:-/autograder}"
cd "$ROOT/source/exercises" || exit 1
export PYTHONPATH="$ROOT/source/lib:$ROOT/source/exercises"
exec "${AUTOGRADER_PYTHON:-$ROOT/venv/bin/python}" -m coursekit.gradescope run --root "$ROOT" \\
  --config "$ROOT/source/gradescope.json" "$@"
"""


def requirements() -> str:
  lines = (REPO / "requirements.txt").read_text().splitlines()
  return "\n".join(x for x in lines if x.split("==")[0].strip().lower() in NEEDS) + "\n"


def build(out: Path, visibility: str = "after_published", timeout: float = 60,
          memory: int = 2048) -> Path:
  """The autograder zip: setup.sh, run_autograder and the course, all at its top (Gradescope
  unpacks it into /autograder/source and copies run_autograder to /autograder)."""
  out.parent.mkdir(parents=True, exist_ok=True)
  files = [p for name in CONTENTS for p in ((REPO / name).rglob("*") if (REPO / name).is_dir()
                                            else [REPO / name])
           if p.is_file() and "__pycache__" not in p.parts and ".ipynb_checkpoints" not in p.parts
           and not p.name.endswith(".egg-info") and ".egg-info" not in str(p)]
  config = {"visibility": visibility, "timeout": timeout, "memory": memory}

  def put(z, name, data, mode=0o644):
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.external_attr = (0o100000 | mode) << 16
    z.writestr(info, data, zipfile.ZIP_DEFLATED)
  with zipfile.ZipFile(out, "w") as z:
    put(z, "setup.sh", SETUP, 0o755)
    put(z, "run_autograder", RUN, 0o755)
    put(z, "requirements-grader.txt", requirements())
    put(z, "gradescope.json", json.dumps(config, indent=1) + "\n")
    for p in sorted(files):
      put(z, p.relative_to(REPO).as_posix(), p.read_bytes())
  return out


def test_of(r: dict, statements: dict, visibility: str) -> dict:
  """One exercise's Gradescope test, in the feedback pages' words (`statements`: its
  chapter's, from `feedback.statements`)."""
  info = statements.get(r["exercise"], ("", "", None, ""))
  title = info[0]
  out = "All checks passed." if r["status"] == "pass" else feedback.failure_text(r, info)
  return {"name": f"{r['part']} {r['exercise']}" + (f": {title}" if title else ""),
          "score": float(r["points"] or 0), "max_score": float(r["max_points"] or 0),
          "status": "passed" if r["status"] == "pass" else "failed",
          "output": out, "visibility": visibility}


def results(rows: list[dict], stubs: dict, visibility: str) -> dict:
  info = {p: feedback.statements(stubs[p]) for p in {r["part"] for r in rows} if p in stubs}
  tests = [test_of(r, info.get(r["part"], {}), visibility) for r in rows]
  notes = sorted({n for r in rows for n in feedback.learner_notes(r)})
  return {"score": sum(t["score"] for t in tests), "visibility": visibility,
          "stdout_visibility": "hidden", "tests": tests,
          "output": "\n".join(["About your notebook:"] + [f"- {n}" for n in notes])
          if notes else ""}


def closed(why: str, visibility: str) -> dict:
  """Zero points, and why, for the instructor: what Gradescope shows where grading
  could not run in its sandbox."""
  return {"score": 0, "visibility": visibility, "stdout_visibility": "hidden",
          "output": "This submission could not be graded automatically; your instructor "
                    "has been told and will grade it.",
          "tests": [{"name": "autograder: the sandbox did not start", "score": 0,
                     "max_score": 0, "status": "failed", "visibility": "hidden",
                     "output": f"Not graded, so as never to run a submission outside the "
                               f"sandbox: {why}. See the instructor guide, Gradescope."}]}


def run(root: Path, config: dict, seed: int | None = None, jobs: int = 2) -> dict:
  visibility = config.get("visibility", "after_published")
  (root / "results").mkdir(parents=True, exist_ok=True)
  why = unavailable()
  data = closed(why, visibility) if why else None
  if data is None:
    stubs = load_stubs()
    subs = collect(root / "submission")
    if not subs:
      data = {"score": 0, "visibility": visibility, "tests": [],
              "output": "No notebook (.ipynb) was found in this submission: upload your "
                        "exercise notebook, e.g. part1.ipynb."}
    else:
      opts = Options(timeout=config.get("timeout", 60), memory_mib=config.get("memory", 2048),
                     seed=seed or probes.SHIPPED_SEED + 1 + secrets.randbelow(2**31 - 2))
      try:
        grader = Grader(stubs, opts)
        try:
          rows = sort_rows(grader.grade(subs, jobs), stubs)
        finally:
          grader.close()
        data = results(rows, stubs, visibility)
      except SandboxUnavailable as e:
        data = closed(str(e), visibility)
  path = root / "results" / "results.json"
  path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
  return data


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(prog="python -m coursekit.gradescope",
                               description="Build or run the Gradescope autograder.")
  sub = ap.add_subparsers(dest="command", required=True)
  b = sub.add_parser("build", help="write the autograder zip")
  b.add_argument("--out", type=Path, default=Path("gradescope") / "autograder.zip")
  b.add_argument("--visibility", choices=VISIBILITY, default="after_published",
                 help="when learners see their tests (default: after the grades are published)")
  b.add_argument("--timeout", type=float, default=60, help="seconds per exercise (default 60)")
  b.add_argument("--memory", type=int, default=2048, help="MiB per sandbox (default 2048)")
  r = sub.add_parser("run", help="grade ROOT/submission into ROOT/results/results.json")
  r.add_argument("--root", type=Path, default=Path("/autograder"))
  r.add_argument("--config", type=Path, help="the build's options (gradescope.json)")
  r.add_argument("--seed", type=seed_arg, help="the checks' seed (default: a random one)")
  r.add_argument("--jobs", type=int, default=2)
  args = ap.parse_args(argv)
  if args.command == "build":
    path = build(args.out, args.visibility, args.timeout, args.memory)
    print(f"wrote {path}: upload it on Gradescope's Configure Autograder page")
    return 0
  config = json.loads(args.config.read_text()) if args.config and args.config.exists() else {}
  data = run(args.root, config, args.seed, args.jobs)
  print(f"score {data['score']:g}; wrote {args.root / 'results' / 'results.json'}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
