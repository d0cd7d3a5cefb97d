"""Near-identical answers: the one kind of copying a sandbox can't see.

Each answer (a submission's code for one exercise) is normalized: comments,
docstrings and formatting go (it is parsed and unparsed), and every name the
answer binds itself (functions, arguments, variables) is renamed in order of
first appearance, so renaming and reformatting change nothing. Pairs of
submissions from different students whose normalized answers share at least
`THRESHOLD` of their token 3-grams (Jaccard) are listed. Unanswered stubs and
very short answers are left out.
"""
from __future__ import annotations

import ast
import builtins
import io
import tokenize
from collections import defaultdict

import numpy as np

from .runner import neutralize

THRESHOLD = 0.9
MIN_TOKENS = 12     # shorter answers are too alike by nature


class _Renamer(ast.NodeTransformer):
  def __init__(self):
    self.names: dict[str, str] = {}

  def _new(self, name):
    if name in dir(builtins):
      return name
    return self.names.setdefault(name, f"v{len(self.names)}")

  def visit_FunctionDef(self, node):
    node.name = self._new(node.name)
    if ast.get_docstring(node):
      node.body = node.body[1:] or [ast.Pass()]
    return self.generic_visit(node)

  visit_AsyncFunctionDef = visit_FunctionDef

  def visit_arg(self, node):
    node.arg, node.annotation = self._new(node.arg), None
    return node

  def visit_Name(self, node):
    if isinstance(node.ctx, ast.Store) or node.id in self.names:
      node.id = self._new(node.id)
    return node


def normalize(source: str) -> str:
  try:
    tree = ast.parse(neutralize(source))
  except (SyntaxError, ValueError):
    return " ".join(source.split())
  return ast.unparse(_Renamer().visit(tree))


def tokens(code: str) -> list[str]:
  try:
    return [t.string for t in tokenize.generate_tokens(io.StringIO(code).readline)
            if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                              tokenize.COMMENT, tokenize.ENDMARKER)]
  except (tokenize.TokenError, IndentationError, SyntaxError):
    return code.split()


MAX_TOKENS = 5000   # of one answer (longer ones are compared on their first tokens)


def signature(code: str) -> np.ndarray:
  """The sorted, unique hashes of an answer's token 3-grams, once normalized."""
  toks = tokens(normalize(code))[:MAX_TOKENS]
  if len(toks) < MIN_TOKENS:
    return np.zeros(0, np.int64)
  grams = {hash(tuple(toks[i:i + 3])) for i in range(len(toks) - 2)}
  return np.unique(np.fromiter(grams, np.int64, len(grams)))


def signatures(parsed) -> list[tuple]:
  """[(part, exercise, student, submission, signature)] of one parsed submission's
  answers (unanswered stubs and short answers left out): all the similarity check
  keeps of a notebook."""
  if parsed.failure or not parsed.part:
    return []
  code = defaultdict(str)
  for c in parsed.cells:
    ex = c.get("exercise")
    if c["kind"] == "learner" and ex and "raise NotImplementedError" not in c["source"]:
      code[ex] += "\n" + c["source"]
  out = []
  for ex, text in sorted(code.items()):
    sig = signature(text)
    if sig.size:
      out.append((parsed.part, ex, parsed.student, parsed.sub.label, sig))
  return out


def pairs(sigs: list[tuple], threshold: float = THRESHOLD) -> list[dict]:
  """[{part, exercise, a, b, similarity}] for near-identical answers of different students."""
  by_ex = defaultdict(list)
  for part, ex, student, label, sig in sigs:
    by_ex[part, ex].append((student, label, sig))
  found = []
  for (part, ex), items in sorted(by_ex.items()):
    items.sort(key=lambda t: (t[0], t[1]))
    for i, (sa, la, a) in enumerate(items):   # all pairs: answers are few and short
      for sb, lb, b in items[i + 1:]:
        if sa == sb:
          continue
        inter = np.intersect1d(a, b, assume_unique=True).size
        sim = inter / max(a.size + b.size - inter, 1)
        if sim >= threshold:
          found.append({"part": part, "exercise": ex, "a": f"{sa} ({la})", "b": f"{sb} ({lb})",
                        "similarity": round(sim, 3)})
  return found
