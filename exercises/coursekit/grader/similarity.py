"""Near-identical answers: the one kind of copying a sandbox can't see.

Each answer (the learner's code that the grader runs for one exercise: the
answer and what it needs, from any of the notebook's cells) is normalized:
comments, docstrings and formatting go (on its tokens), and every name the
answer binds itself (functions, arguments, variables) is renamed in order of
first appearance, so renaming and reformatting change nothing. Submissions
from different students whose normalized answers share at least `THRESHOLD`
of their token 3-grams (Jaccard) are listed, in groups (`groups`). Unanswered
stubs (read from the syntax tree) and very short answers are left out.
"""
from __future__ import annotations

import ast
import builtins
import hashlib
import io
import tokenize
from collections import defaultdict

import numpy as np

from .sandboxed.cells import neutralize, parse

THRESHOLD = 0.9
MIN_TOKENS = 12     # shorter answers are too alike by nature


_SKIP = (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.COMMENT,
         tokenize.ENDMARKER)


def _bound_and_docstrings(tree) -> tuple[set, set]:
  """The names an answer binds itself (functions, classes, arguments, variables), and
  where its docstrings start: from one iterative walk, whatever the depth of the code."""
  bound, docs = set(), set()
  for n in ast.walk(tree):
    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
      bound.add(n.name)
    elif isinstance(n, ast.arg):
      bound.add(n.arg)
    elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
      bound.add(n.id)
    if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
        and n.body and isinstance(n.body[0], ast.Expr) \
        and isinstance(n.body[0].value, ast.Constant) and isinstance(n.body[0].value.value, str):
      docs.add(n.body[0].lineno)
  return bound - set(dir(builtins)), docs


def normal_tokens(source: str) -> list[str]:
  """An answer's tokens without comments, docstrings or layout, the names it binds
  renamed in order of first appearance (`v0`, `v1`, ...): linear in its length."""
  python, tree = neutralize(source), parse(source)
  bound, docs = (set(), set()) if isinstance(tree, Exception) else _bound_and_docstrings(tree)
  names, out, previous = {}, [], None
  try:
    for t in tokenize.generate_tokens(io.StringIO(python).readline):
      if t.type in _SKIP or (t.type == tokenize.STRING and t.start[0] in docs
                              and previous in (None, ":", "\n")):
        previous = "\n" if t.type in (tokenize.NEWLINE, tokenize.NL) else previous
        continue
      text = t.string
      if t.type == tokenize.NAME and text in bound and previous != ".":
        text = names.setdefault(text, f"v{len(names)}")
      out.append(text)
      previous = t.string
  except (tokenize.TokenError, IndentationError, SyntaxError):
    return out or python.split()
  return out


def normalize(source: str) -> str:
  return " ".join(normal_tokens(source))


MAX_TOKENS = 5000   # of one answer (longer ones are compared on their first tokens)


def signature(code: str) -> np.ndarray:
  """The sorted, unique hashes of an answer's token 3-grams, once normalized: the same
  in every process, since answers read by different readers or Dask workers are compared."""
  toks = normal_tokens(code)[:MAX_TOKENS]
  if len(toks) < MIN_TOKENS:
    return np.zeros(0, np.int64)
  grams = {_stable_hash("\0".join(toks[i:i + 3])) for i in range(len(toks) - 2)}
  return np.unique(np.fromiter(grams, np.int64, len(grams)))


def _stable_hash(text: str) -> int:
  """64 bits of BLAKE2b: the same in every process, unlike Python's salted `hash`."""
  digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
  return int.from_bytes(digest, "little", signed=True)


def unanswered(source: str) -> bool:
  """Whether the code still holds a stub's answer: a function whose body (past its
  docstring) only raises NotImplementedError. Decided on the syntax tree, so a comment
  or a string that mentions it changes nothing."""
  tree = parse(source)
  if isinstance(tree, Exception):
    return False
  for n in ast.walk(tree):
    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
      body = n.body[1:] if ast.get_docstring(n, clean=False) is not None else n.body
      if len(body) == 1 and isinstance(body[0], ast.Raise) and body[0].exc is not None:
        exc = body[0].exc.func if isinstance(body[0].exc, ast.Call) else body[0].exc
        if isinstance(exc, ast.Name) and exc.id == "NotImplementedError":
          return True
  return False


def signatures(parsed) -> list[tuple]:
  """[(part, exercise, student, submission, signature)] of one parsed submission's
  answers: for each exercise, the learner's statements that the grader runs for it
  (`parsed.runs`: its answers and everything they need, from any cell), unless they are
  unanswered or short. All the similarity check keeps of a notebook."""
  if parsed.failure or not parsed.part:
    return []
  out = []
  for ex, ran in sorted(parsed.runs.items()):
    text = "\n".join(c["source"] for c in ran if c["kind"] == "learner")
    if not text.strip() or unanswered(text):
      continue
    sig = signature(text)
    if sig.size:
      out.append((parsed.part, ex, parsed.student, parsed.sub.label, sig))
  return out


def groups(sigs: list[tuple], threshold: float = THRESHOLD) -> list[dict]:
  """[{part, exercise, students, members, similarity}]: the near-identical answers to
  each exercise, in groups. Two answers whose similarity is at least `threshold` share a
  group, and so does every answer near either (`members`: "student (submission)", sorted;
  `similarity`: the lowest of the pairs that joined them). A group of one student's
  submissions is left out. Identical answers are compared once: a class whose answers
  converge costs time in its distinct answers, not in its pairs of students, and the
  report shows one row per group, not the N² / 2 pairs of a thousand equal answers."""
  by_ex = defaultdict(dict)   # (part, exercise) -> its bytes -> (signature, [(student, label)])
  for part, ex, student, label, sig in sigs:
    by_ex[part, ex].setdefault(sig.tobytes(), (sig, []))[1].append((student, label))
  found = []
  for (part, ex), same in sorted(by_ex.items()):
    answers = list(same.values())
    root, low = list(range(len(answers))), [1.0] * len(answers)   # union-find
    for i, (a, _) in enumerate(answers):   # all pairs of distinct answers: few and short
      for j in range(i + 1, len(answers)):
        b = answers[j][0]
        inter = np.intersect1d(a, b, assume_unique=True).size
        sim = inter / max(a.size + b.size - inter, 1)
        if sim >= threshold:
          ri, rj = _find(root, i), _find(root, j)
          root[rj] = ri
          low[ri] = min(low[ri], low[rj], sim)
    members = defaultdict(list)
    for i, (_, who) in enumerate(answers):
      members[_find(root, i)] += who
    for r, who in members.items():
      students = len({student for student, _ in who})
      if students > 1:
        found.append({"part": part, "exercise": ex, "students": students,
                      "similarity": round(low[r], 3),
                      "members": sorted(f"{s} ({label})" for s, label in who)})
  found.sort(key=lambda g: (g["part"], g["exercise"], -len(g["members"]), g["members"]))
  return found


def _find(root: list, i: int) -> int:
  while root[i] != i:
    root[i] = root[root[i]]
    i = root[i]
  return i
