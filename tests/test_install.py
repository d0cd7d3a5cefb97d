"""A learner without the repository: every exercise notebook, as the site
serves it, passes with the reference answers in a fresh Python that has only
the course installed, by either route that book/running_exercises.md gives:
`pip install autodidax-course.zip` (the site's zip, built by the site's own
code) and `pip install .` in a copy of the repository. With the zip, the learner
then follows that page to the end: installs JupyterLab beside it, downloads a
notebook from the site and opens it in the environment's own lab, whose book
links open the site at their sections (the last of tests/test_links.py's
settings, with its helpers).

The environment lives outside the repository and imports nothing from lib/ or
exercises/ (the last cell of each notebook checks where autodidax and
coursekit come from). It is made once per module, with a kernel; each route
then installs the course, with its dependencies (JAX), from pip's cache or the
index, and nbclient runs the notebooks on the environment's own kernel. An
install must hold every file of both packages: pyproject.toml finds packages
rather than listing them.
"""
import asyncio
import concurrent.futures
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import nbformat
import pytest

from coursekit.learner import stubs
from test_links import _chapters, _click_in_lab, _download, _in_browser, _lab, _links
from test_links import build, site  # noqa: F401 (fixtures)

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p.stem for p in (ROOT / "exercises").glob("*.ipynb"))
PACKAGES = {"autodidax": ROOT / "lib" / "autodidax", "coursekit": ROOT / "exercises" / "coursekit"}

pytestmark = pytest.mark.timeout(900)


def _pins() -> dict:
  """{package: version} from requirements.txt."""
  pins = {}
  for line in (ROOT / "requirements.txt").read_text().splitlines():
    m = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line.strip())
    if m:
      pins[m.group(1).lower()] = m.group(2)
  return pins


def _source_files() -> set:
  """What an install must hold: every .py file of both packages, and the
  expected records, relative to the site-packages folder."""
  files = set()
  for name, folder in PACKAGES.items():
    for f in folder.rglob("*"):
      if f.is_file() and "__pycache__" not in f.parts and (
          f.suffix == ".py" or f.parent.name == "expected"):
        files.add(f"{name}/{f.relative_to(folder).as_posix()}")
  return files


def test_every_folder_with_code_is_a_package():
  """Package discovery finds folders with an __init__.py: a folder of code without
  one would be left out of every install."""
  for folder in PACKAGES.values():
    for d in [folder, *(p for p in folder.rglob("*") if p.is_dir())]:
      if "__pycache__" not in d.parts and any(d.glob("*.py")):
        assert (d / "__init__.py").is_file(), f"{d.relative_to(ROOT)} has no __init__.py"


def test_every_notebook_is_served_by_the_site():
  """Each exercise notebook has a chapter whose download line serves it
  (adx_exercises), and a row on the page that says how to run them."""
  import yaml
  config = yaml.safe_load((ROOT / "_config.yml").read_text())["sphinx"]["config"]
  assert sorted(set(config["adx_exercises"].values())) == NOTEBOOKS
  howto = (ROOT / f"{config['adx_exercises_howto']}.md").read_text()
  for part in NOTEBOOKS:
    assert f'href="../exercises/{part}.ipynb" download>' in howto, part


def test_pyproject_pins_jax_as_requirements_does():
  deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
  pins = _pins()
  for name in ("jax", "jaxlib", "ml_dtypes"):
    assert f"{name}=={pins[name]}" in deps, (name, deps)


# --- The learner's environment ----------------------------------------------------------------

def _run(*cmd, **kw):
  proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600, **kw)
  assert proc.returncode == 0, f"{cmd}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
  return proc


def _pip(env, *args, cwd=None):
  """pip (the tests' own) working on `env`'s Python."""
  return _run(sys.executable, "-m", "pip", "--python", env / "bin" / "python",
              "--disable-pip-version-check", "-q", *args, cwd=cwd)


def _clean_env() -> dict:
  """The environment for the kernel: nothing that points into the repository."""
  env = {k: v for k, v in os.environ.items()
         if k not in ("PYTHONPATH", "VIRTUAL_ENV", "COURSEKIT_RECORD", "PYTEST_ADDOPTS")}
  venv_bin = str(Path(sys.executable).parent)
  env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                if p and p != venv_bin)
  return env


@pytest.fixture(scope="module")
def learner(tmp_path_factory):
  """A fresh venv outside the repository with a kernel; the course not yet in it."""
  home = tmp_path_factory.mktemp("learner")
  assert ROOT not in home.parents
  env = home / "env"
  _run(sys.executable, "-m", "venv", "--without-pip", env)
  _pip(env, "install", f"ipykernel=={_pins()['ipykernel']}")
  kernels = home / "kernels" / "learner"
  kernels.mkdir(parents=True)
  (kernels / "kernel.json").write_text(json.dumps({
      "argv": [str(env / "bin" / "python"), "-m", "ipykernel_launcher", "-f",
               "{connection_file}"],
      "display_name": "the learner's Python", "language": "python"}))
  return home


@pytest.fixture(scope="module")
def zip_file(tmp_path_factory):
  """autodidax-course.zip, written by the site's extension (book/_ext)."""
  spec = importlib.util.spec_from_file_location(
      "exercises_download", ROOT / "book" / "_ext" / "exercises_download.py")
  ext = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(ext)
  path = tmp_path_factory.mktemp("site") / ext.ZIP
  ext.write_zip(ROOT, path)
  return path


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
  """A copy of the repository's files, as a clone has them (tracked, or new and
  not ignored: no .venv, no build output)."""
  out = tmp_path_factory.mktemp("clone")
  files = _run("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard",
               cwd=ROOT).stdout.split("\0")
  for rel in filter(None, files):
    src = ROOT / rel
    if src.is_file():
      (out / rel).parent.mkdir(parents=True, exist_ok=True)
      (out / rel).write_bytes(src.read_bytes())
  return out


ROUTES = ["pip install autodidax-course.zip", "pip install ."]


@pytest.fixture(scope="module", params=ROUTES)
def installed(request, learner):
  """The learner's environment with the course installed by one route (the
  other route's install removed first). Returns its site-packages folder."""
  env = learner / "env"
  _pip(env, "uninstall", "-y", "autodidax")
  if request.param == ROUTES[0]:   # with its dependencies (JAX), as the learner's does
    _pip(env, "install", request.getfixturevalue("zip_file"))
  else:
    _pip(env, "install", ".", cwd=request.getfixturevalue("clone"))
  [packages] = (env / "lib").glob("python3*/site-packages")
  return packages


def test_the_install_holds_every_package_and_file(installed):
  """File for file: every module of both packages (and the expected records)
  is installed, and nothing else of ours."""
  got = {f.relative_to(installed).as_posix() for name in PACKAGES
         for f in (installed / name).rglob("*")
         if f.is_file() and "__pycache__" not in f.parts}
  assert got == _source_files()


def _with_answers(part: str) -> nbformat.NotebookNode:
  """The downloaded notebook (exercises/<part>.ipynb, which the site serves as
  is), with each answer cell replaced by the reference solution's, by cell id,
  and a last cell that says where the course was imported from."""
  nb = nbformat.read(ROOT / "exercises" / f"{part}.ipynb", as_version=4)
  source = next(p for p in stubs.sources() if p.stem == part)
  answers = {c.id: c.source for c in stubs.read_source(source).cells
             if c.metadata.get("role") == "solution"}
  for cell in nb.cells:
    if cell.metadata.get("role") == "solution":
      cell.source = answers[cell.id]
  nb.cells.append(nbformat.v4.new_code_cell(
      "import json, sys, autodidax, coursekit\n"
      "print(json.dumps([autodidax.__file__, coursekit.__file__, sys.path]))"))
  return nb


async def _execute(nb, learner, cwd):
  from jupyter_client.kernelspec import KernelSpecManager
  from jupyter_client.manager import AsyncKernelManager
  from nbclient import NotebookClient
  km = AsyncKernelManager(kernel_name="learner",
                          kernel_spec_manager=KernelSpecManager(
                              kernel_dirs=[str(learner / "kernels")]))
  client = NotebookClient(nb, km=km, timeout=300, allow_errors=True, record_timing=False)
  await client.async_start_new_kernel(cwd=str(cwd), env=_clean_env())
  try:
    await client.async_start_new_kernel_client()
    for index, cell in enumerate(nb.cells):
      await client.async_execute_cell(cell, index)
  finally:
    await client._async_cleanup_kernel()
  return nb


def _run_alone(coroutine):
  """asyncio.run in a thread of its own: an earlier test in this worker (nbclient's
  sync API) may have left an event loop marked running in the main thread."""
  with concurrent.futures.ThreadPoolExecutor(1) as pool:
    return pool.submit(asyncio.run, coroutine).result()


def _errors(cell) -> str:
  return "\n".join(f"{o.ename}: {o.evalue}" for o in cell.outputs if o.output_type == "error")


@pytest.mark.parametrize("part", NOTEBOOKS)
def test_notebook_passes_with_the_reference_answers(installed, learner, part, tmp_path):
  nb = _with_answers(part)
  stub = nbformat.read(ROOT / "exercises" / f"{part}.ipynb", as_version=4)
  stored = {c.id: "".join(o.get("text", "") for o in c.outputs)
            for c in stub.cells if c.metadata.get("role") == "check"}
  nbformat.write(nb, tmp_path / f"{part}.ipynb")   # the learner's downloads folder
  _run_alone(_execute(nb, learner, tmp_path))
  for cell in nb.cells:
    if cell.cell_type == "code":
      assert not _errors(cell), f"cell {cell.id} of {part}:\n{cell.source}\n{_errors(cell)}"
    if cell.metadata.get("role") == "check":
      printed = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
      assert printed == stored[cell.id], (cell.metadata["exercise"], printed)
  where = json.loads(nb.cells[-1].outputs[0].text)
  for module_file in where[:2]:
    assert Path(module_file).is_relative_to(installed), where
  for entry in where[2]:   # '' is the notebook's folder
    assert not (tmp_path / entry).resolve().is_relative_to(ROOT), f"{entry} is in the repository"


# --- The learner's lab ------------------------------------------------------------------------

def _learners_commands() -> list:
  """The commands book/running_exercises.md gives a learner without the repository
  (the bash block of "In any Python environment"), each as its words."""
  text = (ROOT / "book" / "running_exercises.md").read_text()
  section = text.split("## In any Python environment", 1)[1]
  block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
  return [shlex.split(command) for line in block.splitlines() for command in line.split("&&")]


@pytest.mark.parametrize("installed", ROUTES[:1], indirect=True)
def test_a_downloaded_notebook_opens_the_sites_sections_in_the_learners_lab(
    installed, learner, zip_file, site, tmp_path):
  """As book/running_exercises.md says: download the notebook it names from the site;
  beside the zip (installed), `pip install` what else it names (JupyterLab), at the
  versions this repository runs, which pip's cache holds; run its `jupyter lab`
  command, from the activated environment, in the downloads folder. A click on the
  notebook's first book link opens the site's page at its section."""
  commands = _learners_commands()
  [install] = [c for c in commands if c[:2] == ["pip", "install"]]
  [open_lab] = [c for c in commands if c[:2] == ["jupyter", "lab"]]
  assert zip_file.name in install[2:], install
  notebook = Path(open_lab[2]).stem
  doc = next(d for d, nb in sorted(_chapters().items()) if nb == notebook)
  downloads = tmp_path / "downloads"
  downloads.mkdir()
  saved = _in_browser(lambda context: _download(context.new_page(), site, doc))
  (downloads / f"{notebook}.ipynb").write_text(saved)
  links = _links(json.loads(saved))
  assert links and all(link.startswith(f"{site}book/") for link in links), links

  env = learner / "env"
  frozen = _run(sys.executable, "-m", "pip", "freeze", "--exclude-editable").stdout
  (tmp_path / "constraints.txt").write_text(frozen)
  _pip(env, "install", "-c", tmp_path / "constraints.txt",
       *(name for name in install[2:] if name != zip_file.name))

  activated = {k: v for k, v in _clean_env().items() if not k.startswith(("JUPYTER", "PYTEST"))}
  activated.update(VIRTUAL_ENV=str(env), PATH=f"{env / 'bin'}{os.pathsep}{activated['PATH']}",
                   JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
                   JUPYTER_CONFIG_DIR=str(tmp_path / "config"))
  assert Path(shutil.which("jupyter", path=activated["PATH"])).parent == env / "bin"
  with _lab(open_lab, tmp_path, cwd=downloads, env=activated) as lab:
    url, found = _in_browser(_click_in_lab, lab, notebook)
  assert url == links[0] and found, url
