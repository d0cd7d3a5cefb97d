"""Each chapter's reading time, computed from the page itself.

Under a chapter's title (after its exercises' download line) goes a line
such as "Reading time: about 50 minutes: 4,200 words and 310 lines of code".
Prose is read at WORDS_PER_MINUTE; code (the cells and the library listings,
not their outputs, and not what is folded away) at CODE_LINES_PER_MINUTE. A chapter is a page that
myst-nb executed (it has a kernel); the other pages get no line.
"""
from docutils import nodes

WORDS_PER_MINUTE = 200
CODE_LINES_PER_MINUTE = 10


FOLDED = ("cell_output", "sd-dropdown", "tag_hide-input", "tag_hide-cell", "tag_remove-input")


def _in_output(node) -> bool:
  """Whether a code block is an output, or folded away (a dropdown, a hidden
  cell): the reader reads neither as code."""
  while node is not None:
    if isinstance(node, nodes.raw) or type(node).__name__ == "dropdown_main":
      return True
    if isinstance(node, nodes.Element) and any(c in node.get("classes", []) for c in FOLDED):
      return True
    node = node.parent
  return False


def measure(doctree) -> tuple[int, int]:
  """(words of prose, lines of code) on a page."""
  words = lines = 0
  for block in doctree.findall(nodes.literal_block):
    if not _in_output(block):
      lines += sum(1 for line in block.astext().splitlines() if line.strip())
  for text in doctree.findall(nodes.Text):
    node, skip = text.parent, False
    while node is not None:
      if isinstance(node, (nodes.literal_block, nodes.raw, nodes.title)) or (
          isinstance(node, nodes.Element) and "cell_output" in node.get("classes", [])):
        skip = True
        break
      node = node.parent
    if not skip:
      words += len(text.astext().split())
  return words, lines


def minutes(words: int, lines: int) -> int:
  m = words / WORDS_PER_MINUTE + lines / CODE_LINES_PER_MINUTE
  return max(5, int(5 * round(m / 5)))


def _add_line(app, doctree, docname):
  if app.builder.format != "html" or "kernelspec" not in app.env.metadata.get(docname, {}):
    return
  section = next(iter(doctree.findall(nodes.section)), None)
  if section is None or not isinstance(section[0], nodes.title):
    return
  words, lines = measure(doctree)
  line = nodes.paragraph(classes=["adx-reading-time"])
  line += nodes.emphasis("", f"Reading time: about {minutes(words, lines)} minutes "
                             f"({words:,} words and {lines:,} lines of code).")
  at = 1
  while at < len(section) and isinstance(section[at], nodes.raw) and \
      "adx-download" in section[at].astext():
    at += 1
  section.insert(at, line)


def setup(app):
  # After exercises_download (priority 500) has put its line under the title.
  app.connect("doctree-resolved", _add_line, priority=600)
  return {"parallel_read_safe": True, "parallel_write_safe": True}
