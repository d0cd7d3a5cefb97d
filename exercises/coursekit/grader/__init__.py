"""The instructor's grader: `make grade` (`python -m coursekit.grade`), `--cluster`,
`make gradescope` and the gradebook.

The security boundary is the folder `sandboxed/`: its modules (with the probes and
answer slots of `coursekit.learner`) are zipped with the learner edition of the
library and are all that runs inside a bubblewrap sandbox, beside the learner's code.
Every other module here runs outside and trusts nothing that comes out:

* options and discovery: `options` (limits, seed, version), `submissions` (finding
  and reading notebooks, whose they are), `chapters` (the stubs, which chapter a
  notebook is), `rebuild` (its code around the stub), `definitions` (what runs for an
  exercise), `reading` (all that, in a worker process under a budget), `flags` and
  `similarity` (review aids);
* scheduling runs: `scheduling` (the learner editions, the sandbox runs, the
  reference records, the `Grader`), `cluster` (the same on Dask), `edition` (the
  library without an exercise's answer, zipped), `sandbox` and `limits` (bubblewrap,
  cgroups, seccomp: the wall itself), `outcome` (what comes out of a sandbox);
* verdicts: `verdicts` (a run's records against the reference's: a row);
* writing results: `cli` (the command line), `report` (grades.csv, grades.html),
  `feedback` (the learners' pages), `gradebook` and `exports` (SQLite, LMS CSVs),
  `gradescope` (Gradescope's autograder).
"""
