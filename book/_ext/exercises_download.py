"""A "download the exercises" link on every chapter, served by the site itself.

`adx_exercises` (in _config.yml) maps a chapter to its stub notebook in
exercises/. Each chapter gets a line under its title linking to its
notebook and to the page that says how to run it (`adx_exercises_howto`).
The build copies the notebooks into the site's exercises/ folder, with
autodidax-course.zip: the library and the check helpers, which
`pip install autodidax-course.zip` installs anywhere.
"""
import io
import shutil
import zipfile
from pathlib import Path

from docutils import nodes

OUT = "exercises"                   # in the built site
ZIP = "autodidax-course.zip"
IN_ZIP = [   # what `pip install` needs: the package metadata and both packages (every
  # subpackage), with the check cells' probes and the reference's expected records
  "pyproject.toml", "lib/autodidax/**/*.py", "exercises/coursekit/**/*.py",
  "exercises/coursekit/learner/expected/*.json",
]


def _link_line(app, docname, notebook):
  prefix = "../" * docname.count("/")   # from this page to the site's root
  howto = app.builder.get_relative_uri(docname, app.config.adx_exercises_howto)
  return (f'<p class="adx-download">⬇ <a class="reference adx-notebook" '
          f'href="{prefix}{OUT}/{notebook}.ipynb" download="{notebook}.ipynb">'
          f'Download the exercises ({notebook}.ipynb)</a>: '
          f'<a class="reference internal" href="{howto}">how to run them</a>, '
          'on your computer or in any Jupyter.</p>')


ZIP_SIZE = "<!-- adx-zip-size -->"   # where a page shows the zip's size (inline HTML)


def _zip_size(app) -> str:
  """The zip's size as the build writes it, in kB (once per build)."""
  if not hasattr(app, "_adx_zip_size"):
    buffer = io.BytesIO()
    write_zip(Path(app.confdir), buffer)
    app._adx_zip_size = f"{round(len(buffer.getvalue()) / 1000)} kB"
  return app._adx_zip_size


def _fill_zip_size(app, doctree):
  for node in doctree.findall(nodes.raw):
    if ZIP_SIZE in node.astext():
      text = node.astext().replace(ZIP_SIZE, _zip_size(app))
      node.replace_self(nodes.raw("", text, format=node.get("format", "html")))


def _add_link(app, doctree, docname):
  _fill_zip_size(app, doctree)
  notebook = app.config.adx_exercises.get(docname)
  if notebook is None or app.builder.format != "html":
    return
  section = next(iter(doctree.findall(nodes.section)), None)
  if section is None or not isinstance(section[0], nodes.title):
    return
  section.insert(1, nodes.raw("", _link_line(app, docname, notebook), format="html"))


def _check(app, config):
  src = Path(app.confdir)
  missing = [n for n in config.adx_exercises.values()
             if not (src / "exercises" / f"{n}.ipynb").is_file()]
  if missing:
    raise FileNotFoundError(f"adx_exercises: no exercises/{missing[0]}.ipynb")


def _copy(app, exception):
  if exception is not None or app.builder.format != "html":
    return
  src, out = Path(app.confdir), Path(app.outdir) / OUT
  out.mkdir(parents=True, exist_ok=True)
  for notebook in sorted(set(app.config.adx_exercises.values())):
    shutil.copyfile(src / "exercises" / f"{notebook}.ipynb", out / f"{notebook}.ipynb")
  write_zip(src, out / ZIP)


def write_zip(src: Path, path: Path):
  """autodidax-course.zip from the repository at `src` (tests/test_install.py
  installs it in a fresh environment and runs the notebooks on it)."""
  with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
    for f in sorted({f for pattern in IN_ZIP for f in src.glob(pattern)}):
      if "__pycache__" in f.parts:
        continue
      # Fixed timestamps: the same sources give the same zip.
      info = zipfile.ZipInfo(f"autodidax-course/{f.relative_to(src)}", (2026, 1, 1, 0, 0, 0))
      info.compress_type = zipfile.ZIP_DEFLATED
      z.writestr(info, f.read_bytes())


def setup(app):
  app.add_config_value("adx_exercises", {}, "env")
  app.add_config_value("adx_exercises_howto", "", "env")
  app.connect("config-inited", _check)
  app.connect("doctree-resolved", _add_link)
  app.connect("build-finished", _copy)
  return {"parallel_read_safe": True, "parallel_write_safe": True}
