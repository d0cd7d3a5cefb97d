"""The course's own tooling: stub notebooks, check helpers and the grader."""
