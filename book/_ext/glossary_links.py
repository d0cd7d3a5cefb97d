"""The glossary's "See Part 2" become links to the chapters.

In each glossary definition, the chapter names that follow a "See" (as in
"See Part 1 and Part 2.") become references to those chapters'
pages. The names and pages are `adx_chapter_names` in _config.yml.
"""
import re

from docutils import nodes
from sphinx import addnodes
from sphinx.transforms import SphinxTransform


class LinkChapterNames(SphinxTransform):
  default_priority = 400

  def apply(self):
    names = self.config.adx_chapter_names
    if not names:
      return
    name_re = re.compile("|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)))
    for definition in self.document.findall(nodes.definition):
      if not isinstance(definition.parent, nodes.definition_list_item):
        continue
      for text in list(definition.findall(nodes.Text)):
        if isinstance(text.parent, (nodes.literal, nodes.reference, addnodes.pending_xref)):
          continue
        s = str(text)
        see = s.find("See ")
        if see < 0 or not name_re.search(s, see):
          continue
        new, at = [nodes.Text(s[:see])], see
        for m in name_re.finditer(s, see):
          new.append(nodes.Text(s[at:m.start()]))
          ref = addnodes.pending_xref("", nodes.inline("", m.group()), refdomain="std",
                                      reftype="doc", reftarget="/" + names[m.group()],
                                      refexplicit=True, refwarn=True,
                                      refdoc=self.env.docname)
          new.append(ref)
          at = m.end()
        new.append(nodes.Text(s[at:]))
        text.parent.replace(text, [n for n in new if not isinstance(n, nodes.Text) or str(n)])


def setup(app):
  app.add_config_value("adx_chapter_names", {}, "env")
  app.add_transform(LinkChapterNames)
  return {"parallel_read_safe": True, "parallel_write_safe": True}
