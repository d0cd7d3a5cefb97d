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
import re
import tokenize
from collections import defaultdict

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


def shingles(toks: list[str], n: int = 3) -> set:
  return {tuple(toks[i:i + n]) for i in range(max(len(toks) - n + 1, 1))}


def answers(parsed, stubs) -> dict:
  """{(part, exercise): {(student, submission): code}} from parsed submissions."""
  out = defaultdict(dict)
  for p in parsed:
    if p.failure or not p.part:
      continue
    for c in p.cells:
      ex = c.get("exercise")
      if c["kind"] == "learner" and ex and "raise NotImplementedError" not in c["source"]:
        key = (p.student, p.sub.label)
        out[p.part, ex][key] = out[p.part, ex].get(key, "") + "\n" + c["source"]
  return out


def pairs(parsed, stubs, threshold: float = THRESHOLD) -> list[dict]:
  """[{part, exercise, a, b, similarity}] for near-identical answers of different students."""
  found = []
  for (part, ex), by_sub in sorted(answers(parsed, stubs).items()):
    items = []
    for (student, label), code in sorted(by_sub.items()):
      toks = tokens(normalize(code))
      if len(toks) >= MIN_TOKENS:
        items.append((student, label, shingles(toks)))
    for i, (sa, la, sh_a) in enumerate(items):   # all pairs: sets are small, so this is fast
      for sb, lb, sh_b in items[i + 1:]:
        if sa == sb:
          continue
        sim = len(sh_a & sh_b) / max(len(sh_a | sh_b), 1)
        if sim >= threshold:
          found.append({"part": part, "exercise": ex, "a": f"{sa} ({la})", "b": f"{sb} ({lb})",
                        "similarity": round(sim, 3)})
  return found
