"""Short tracebacks for the chapters' error demos.

A chapter that shows an error wants the reader to see the message and where
in *their* code it happened, not fifty lines of library frames with the build
machine's paths. Each chapter's hidden setup cell runs

    import sys; sys.path.insert(0, "_ext")
    import short_tracebacks; short_tracebacks.install()

which makes IPython report an exception as the last few frames that belong to
notebook cells, then the message, wrapped to the page's width. A frame that an
earlier error on the page already showed is not shown again: one line says
how many were left out, so each traceback appears once. (JAX does
something similar for its users: `jax_traceback_filtering` hides JAX's own
frames.) tests/test_site_text.py checks the built pages for long tracebacks and
machine paths. Set AUTODIDAX_FULL_TRACEBACKS=1 to see full tracebacks when
a chapter fails to build.

Loaded as a Sphinx extension too (see _config.yml), it registers a Pygments
lexer for these tracebacks and makes myst-nb use it for error outputs: the
default `ipythontb` lexer hands unrecognized lines (a wrapped message) to the
Python lexer, which fails on a backtick and turns into a build warning.
"""
import os
import re
import textwrap
import traceback

MAX_FRAMES = 3    # the innermost frames of the reader's own code
WIDTH = 80        # wrap the message to this many characters


def _cell_label(shell, filename):
  """'Cell In[4]' for a frame in a notebook cell, None for any other file."""
  count = getattr(shell.compile, "_filename_map", {}).get(filename)
  if count is not None:
    return f"Cell In[{count}]"
  return "a cell" if re.search(r"ipykernel_\d+", filename) else None


def _wrap(line):
  indent = re.match(r"\s*", line).group()
  return textwrap.wrap(line, WIDTH, subsequent_indent=indent + "  ",
                       break_on_hyphens=False) or [""]


_shown: set = set()   # the frames earlier errors of this session showed


def short_traceback(shell, etype, value, tb):
  """The lines to show for an exception: the cell frames, then the message."""
  frames = [(f, label) for f in traceback.extract_tb(tb)
            if (label := _cell_label(shell, f.filename))][-MAX_FRAMES:]
  lines = ["Traceback of the notebook's own code (the library's frames are hidden):"]
  again = 0
  for f, label in frames:
    key = (label, f.lineno, f.name)
    if key in _shown:
      again += 1
      continue
    _shown.add(key)
    lines.append(f"{label}, line {f.lineno}, in {f.name}")
    if f.line:
      lines.extend("    " + s for s in _wrap(f.line.strip()))
  if again:
    lines.append(f"({again} more frame{'s' if again > 1 else ''} as in an earlier error above)")
  for part in traceback.format_exception_only(etype, value):
    for line in part.rstrip("\n").split("\n"):
      lines.extend(_wrap(line))
  return lines


def _handler(shell, etype, value, tb, tb_offset=None):
  # IPython ignores what a custom handler returns: show the lines ourselves
  # (ipykernel sends them as the cell's error output).
  shell._showtraceback(etype, value, short_traceback(shell, etype, value, tb))


def install(shell=None):
  """Report every exception in this IPython session with `short_traceback`."""
  if os.environ.get("AUTODIDAX_FULL_TRACEBACKS"):
    return   # debugging a chapter: keep IPython's full tracebacks
  if shell is None:
    from IPython import get_ipython
    shell = get_ipython()
  shell.set_custom_exc((Exception,), _handler)


# --- In Sphinx: highlight error outputs without ever failing ----------------------------

def _lexer():
  from pygments.lexer import RegexLexer, bygroups
  from pygments.token import Generic, Name, Number, Text

  class ShortTracebackLexer(RegexLexer):
    """The lines `short_traceback` writes; anything else is plain text."""
    name = "Short traceback"
    aliases = ["autodidax-tb"]
    tokens = {"root": [
        (r"^Traceback.*\n", Generic.Heading),
        (r"^(Cell In\[\d+\]|a cell)(, line )(\d+)(, in )(.*\n)",
         bygroups(Name.Namespace, Text, Number.Integer, Text, Name.Function)),
        (r"^([\w.]*(?:Error|Exception|Warning|Interrupt|Exit|Iteration)\w*)(:?)(.*\n)",
         bygroups(Generic.Error, Text, Text)),
        (r".*\n", Text),
    ]}
  return ShortTracebackLexer


def _use_lexer(app, config):
  config.nb_render_error_lexer = "autodidax-tb"


def setup(app):
  app.setup_extension("myst_nb")   # defines nb_render_error_lexer
  app.add_lexer("autodidax-tb", _lexer())
  app.connect("config-inited", _use_lexer)
  return {"parallel_read_safe": True, "parallel_write_safe": True}
