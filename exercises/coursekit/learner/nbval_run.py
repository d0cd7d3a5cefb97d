"""Run nbval on notebooks, recording the outcome of each cell.

    python -m coursekit.learner.nbval_run [PYTEST OPTIONS] NOTEBOOK...

runs pytest with only the nbval plugin and this one (the venv's other plugins
are not loaded: they cost seconds per run). This module is also the plugin: it
writes JSON to $COURSEKIT_REPORT, when that is set:
`{"<code cell number>": {"outcome": "passed"|"failed"|"skipped",
"error": "<ename>: <evalue>" or null, "message": "<nbval's first line>"}}`
(with one notebook per run: cells are numbered as nbval numbers them).
"""
from __future__ import annotations

import json
import os
import sys

import pytest

_results: dict[int, dict] = {}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
  report = yield
  cell_num = getattr(item, "cell_num", None)
  if cell_num is None or not (call.when == "call" or report.outcome != "passed"):
    return report
  entry = {"outcome": report.outcome, "error": None, "message": ""}
  if report.outcome != "passed":
    # nbval keeps the cell's outputs, the error (with its name) among them.
    for out in getattr(item, "test_outputs", None) or []:
      if out.get("output_type") == "error":
        entry["error"] = f"{out.get('ename')}: {out.get('evalue')}"
    if call.excinfo is not None:
      entry["message"] = str(call.excinfo.value).strip().split("\n")[0]
    elif hasattr(report, "wasxfail"):
      entry["message"] = report.wasxfail or "not run"
  _results.setdefault(cell_num, entry)   # the first failing phase wins
  return report


def pytest_sessionfinish(session):
  path = os.environ.get("COURSEKIT_REPORT")
  if path:
    with open(path, "w") as f:
      json.dump({str(k): v for k, v in sorted(_results.items())}, f, indent=1)


def main(argv=None) -> int:
  os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
  args = sys.argv[1:] if argv is None else list(argv)
  return pytest.main(["-p", "nbval.plugin", "-p", "coursekit.learner.nbval_run", "-p",
                      "no:cacheprovider", *args])


if __name__ == "__main__":
  sys.exit(main())
