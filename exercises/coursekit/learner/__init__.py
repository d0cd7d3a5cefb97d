"""What the learner's side runs: nothing here imports the grader (`coursekit.grader`).

* `checks`: what a check cell calls, `checks.check("1.3", globals())`;
* `probe` and `probes/<part>.py`: each exercise's probe, which runs the answers on
  seeded inputs and records what they give, and `compare`, which judges records;
* `answers`: the slots that take a removed library function's place (in check cells
  and in the grader's learner edition);
* `expected/<part>.json`: the reference's records at the shipped seed;
* `stubs`: `make exercises`, the stub notebooks built from `exercises/source`;
* `lab`: `make lab`'s server extension; `nbval_run`: nbval, recording each cell.
"""
