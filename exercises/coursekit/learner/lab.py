"""`make lab`'s server extension: the notebooks' "In the book" links open the
book, built in the repository by `make book`, from the lab's own server.

A stub links `../book/<chapter>.html#<section>`, which works on the site, where
the notebooks sit in exercises/ beside book/. The lab's root is exercises/, so
that address is outside it. Here the built site is served at
`<base_url>autodidax/`, and a notebook the lab opens shows its book links
there; they are written back as they were when it is saved, so the file on
disk never changes. scripts/lab.sh loads this module; nothing else imports it.
"""
from pathlib import Path

from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager
from jupyter_server.utils import url_path_join
from tornado import web

SITE = Path(__file__).resolve().parents[3] / "_build" / "html"   # what `make book` writes
ROUTE = "autodidax/"
IN_FILE = "](../book/"


class BookHandler(JupyterHandler, web.StaticFileHandler):
  """The built site, to whoever is logged in to the lab."""

  @web.authenticated
  def get(self, path: str, include_body: bool = True):
    if not (SITE / "book").is_dir():
      raise web.HTTPError(404, "The book isn't built: run `make book` in the repository, "
                          "then reload this page.")
    return web.StaticFileHandler.get(self, path, include_body)


def _relink(cells, old: str, new: str):
  for cell in cells:
    if cell.get("cell_type") == "markdown":
      source = cell["source"]
      if isinstance(source, list):
        source = "".join(source)
      cell["source"] = source.replace(old, new)


class BookLinksContentsManager(AsyncLargeFileManager):
  """Notebooks as on disk, but for their book links, which point at the lab's
  copy of the site while a notebook is open."""

  @property
  def _in_lab(self) -> str:
    return f"]({url_path_join(self.parent.base_url, ROUTE)}book/"

  async def get(self, path, content=True, type=None, format=None, **kwargs):
    model = await super().get(path, content=content, type=type, format=format, **kwargs)
    if model["type"] == "notebook" and model.get("content"):
      _relink(model["content"].cells, IN_FILE, self._in_lab)
    return model

  async def save(self, model, path=""):
    if model.get("type") == "notebook" and model.get("content"):
      _relink(model["content"]["cells"], self._in_lab, IN_FILE)
    return await super().save(model, path)


def _jupyter_server_extension_points():
  return [{"module": "coursekit.learner.lab"}]


def _link_jupyter_server_extension(serverapp):
  serverapp.contents_manager_class = BookLinksContentsManager


def _load_jupyter_server_extension(serverapp):
  route = url_path_join(serverapp.base_url, ROUTE, "(.*)")
  serverapp.web_app.add_handlers(".*$", [(route, BookHandler,
                                          {"path": str(SITE), "default_filename": "index.html"})])
