"""Drop duplicate <script> tags (a Sphinx 7.4 bug).

An extension that calls `app.add_js_file(None, body=...)` after the builder
starts (sphinx-thebe, sphinx-togglebutton) gets its inline script written twice:
once as filename None, once more as '' when the builder re-reads the registry.
Run twice, `const THEBE_JS_URL = ...` throws "already declared" on every page.
"""


def _dedupe(app, pagename, templatename, context, doctree):
  seen, unique = set(), []
  for js in context.get("script_files", []):
    key = (js.filename or "", tuple(sorted(js.attributes.items())))
    if key not in seen:
      seen.add(key)
      unique.append(js)
  context["script_files"] = unique


def setup(app):
  app.connect("html-page-context", _dedupe, priority=900)  # after the others
  return {"parallel_read_safe": True, "parallel_write_safe": True}
