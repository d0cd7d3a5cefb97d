"""Library listings over MAX_LINES lines are folded, behind a one-line summary.

A chapter shows the library's code with `literalinclude`. A listing longer
than MAX_LINES lines starts folded (a <details>, so it needs no
JavaScript): its summary names the function or class, says what it does
(the first sentence of its docstring) and how long it is, so that a reader
can go on reading and open the code when it is wanted.
tests/test_site_text.py checks the rule on the built pages.
"""
import ast
import html
import re

from docutils import nodes
from sphinx.directives.code import LiteralInclude

MAX_LINES = 30


def _first_sentence(code: str) -> str:
  """The first sentence of the listing's docstring, or ''."""
  try:
    tree = ast.parse(code)
  except SyntaxError:
    return ""
  defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
  doc = ast.get_docstring(defs[0]) if defs else None
  if not doc:
    return ""
  text = " ".join(doc.split())
  m = re.match(r"(.+?[.:;])(\s|$)", text)
  return (m.group(1) if m else text).rstrip(".:;")


class FoldedLiteralInclude(LiteralInclude):
  def run(self):
    out = super().run()
    blocks = [n for n in out if isinstance(n, nodes.literal_block)]
    if len(blocks) != 1:
      return out
    code = blocks[0].astext()
    n = code.count("\n") + 1
    if n <= MAX_LINES:
      return out
    name = self.options.get("pyobject") or self.arguments[0].rsplit("/", 1)[-1]
    what = _first_sentence(code)
    summary = (f"<code>{html.escape(name)}</code>" + (f": {html.escape(what)}" if what else "")
               + f" <span class=\"adx-listing-size\">({n} lines; show the code)</span>")
    return [nodes.raw("", f'<details class="adx-listing"><summary>{summary}</summary>',
                      format="html"),
            *out,
            nodes.raw("", "</details>", format="html")]


def setup(app):
  app.add_directive("literalinclude", FoldedLiteralInclude, override=True)
  return {"parallel_read_safe": True, "parallel_write_safe": True}
