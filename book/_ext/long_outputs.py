"""Long outputs fold: no output block shows more than MAX_LINES at once.

An output over MAX_LINES lines shows its first HEAD_LINES; the rest waits
behind a "show the other N lines" toggle (a <details>, so it needs no
JavaScript). tests/test_site.py measures the rule in the browser.
"""
from docutils import nodes

MAX_LINES = 40
HEAD_LINES = 24


def _is_output(node) -> bool:
  while node is not None:
    if isinstance(node, nodes.Element) and "cell_output" in node.get("classes", []):
      return True
    node = node.parent
  return False


def _fold(app, doctree, docname):
  if app.builder.format != "html":
    return
  for block in list(doctree.findall(nodes.literal_block)):
    if not _is_output(block) or "adx-folded" in block["classes"]:
      continue
    lines = block.astext().split("\n")
    if len(lines) <= MAX_LINES:
      continue
    head, rest = lines[:HEAD_LINES], lines[HEAD_LINES:]
    first, second = (nodes.literal_block(text, text, **block.attributes)
                     for text in ("\n".join(head), "\n".join(rest)))
    for b in (first, second):
      b["classes"] = [*block["classes"], "adx-folded"]
    parent, at = block.parent, block.parent.index(block)
    parent[at:at + 1] = [
        first,
        nodes.raw("", f'<details class="adx-more"><summary>show the other {len(rest)} '
                      "lines of this output</summary>", format="html"),
        second,
        nodes.raw("", "</details>", format="html"),
    ]


def setup(app):
  app.connect("doctree-resolved", _fold)
  return {"parallel_read_safe": True, "parallel_write_safe": True}
