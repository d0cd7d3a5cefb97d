"""Keeps an import that no part of the course needs from running (imported first by
`coursekit/__init__.py`, so it holds in every process that imports coursekit).

nbformat's validator imports jsonschema, whose optional URI format check compiles a
grammar at import (rfc3987_syntax, ~1.2 s): no notebook needs it, and every process
of the grader (reader, Dask workers) and every learner's check cell would pay for it.
"""
import sys

sys.modules.setdefault("rfc3987_syntax", None)
