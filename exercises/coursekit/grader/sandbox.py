"""Run untrusted code in a bubblewrap sandbox, with whole-sandbox limits.

Each run gets:

* a read-only view of the runtime only: /usr (and its /bin, /lib links), the
  Python installation and the virtual environment, each at its own path; the
  files the caller copies in through file descriptors (the grader's zip of
  the learner edition and its runner); a private, size-limited, writable
  /tmp (also the working directory and $HOME) and /dev/shm. The rest of the
  file system, its root and /dev included, is read-only;
* no network, its own pid namespace (when its first process ends, the kernel
  kills every process left in it: nothing outlives a run), its own IPC, UTS
  and cgroup namespaces, a new session (no terminal), an unprivileged uid
  (65534), no capabilities, no further user namespaces (`--disable-userns`,
  bwrap >= 0.8), and an environment of its own;
* nothing of the grader: bwrap starts with an empty environment and reads its
  options from a file descriptor, so the sandbox's /proc/1/environ is empty and
  its /proc/1/cmdline is `bwrap --args 4 -- <command>`; the result channel is a
  pipe whose number the command gets on stdin, not from the environment; and
  every descriptor has the same number in every run (`FD_RESULT`, ...);
* limits for the sandbox as a whole, from cgroups: memory (tmpfs included),
  the number of processes, and CPU (a quota of `cpus` cores, and a share equal
  to every other sandbox's); its CPU time, all processes together, is counted
  and ends the run at `cpu_seconds` (the wall clock, `timeout`, is only a
  generous bound, moved on by the time its threads waited for a CPU, so that
  a busy machine doesn't end a run that a quiet one finishes). As root, from the cgroup v1 `memory`, `pids`, `cpu` and
  `cpuacct` controllers; otherwise from `systemd-run --user --scope` where a
  user session has one; else per-process rlimits only (`Sandbox.mode` says
  which, and the grader's report says so at its top). In every mode, /tmp and
  /dev/shm have a size limit, and nothing else is writable;
* per-process rlimits as well (CPU seconds, file size, no core files);
* a seccomp filter (`lock_filter`) that denies file locks, leases and file
  watches: every sandbox sees the same read-only files, and a lock or a watch
  on one of them would be a channel from one sandbox to another;
* capped output: at most `output_cap` bytes of stdout+stderr are kept, the rest
  is read and dropped; the result channel (a separate pipe) is capped too.

The submissions, the grader's output and working folders, the course
repository (but its virtual environment) and other sandboxes are not
mounted, so not visible.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .limits import CGROUP_V1, Cgroup, limit_mode, lock_filter  # noqa: F401 (CGROUP_V1: where)

WAIT_CREDIT = 2   # the wall-clock bound moves by waits for a CPU up to this many times itself
DISABLE_USERNS = True   # bwrap >= 0.8 can forbid user namespaces inside (found by `unavailable`)


class SandboxUnavailable(RuntimeError):
  """bwrap is missing or can't create its namespaces here."""


@dataclass
class Limits:
  memory_mib: int = 2048        # the whole sandbox
  pids: int = 64                # processes and threads in the whole sandbox
  cpu_seconds: float = 120      # CPU time of the whole sandbox (cgroup cpuacct), and of each process
  cpus: float = 1.0             # CPU quota of the whole sandbox, in cores (cgroup cpu, systemd)
  file_mib: int = 64            # largest file written
  tmp_mib: int = 256            # the private /tmp
  shm_mib: int = 64             # the private /dev/shm
  timeout: float = 360          # wall clock, the whole run (a generous bound: CPU time decides)
  output_cap: int = 64_000      # bytes of stdout+stderr kept
  result_cap: int = 16 << 20    # bytes of result


@dataclass
class Result:
  status: str                   # ok | timeout | killed | exited | output
  returncode: int | None
  signal: str | None = None
  oom: bool = False
  output: str = ""              # the first output_cap bytes of stdout+stderr
  output_bytes: int = 0
  result: bytes = b""
  result_truncated: bool = False
  seconds: float = 0.0
  cpu_seconds: float | None = None   # the whole sandbox's CPU time, where a cgroup counts it
  wall: bool = False            # a timeout at the wall-clock bound (not the CPU limit)
  waited: float | None = None   # seconds its processes waited for a CPU, where a cgroup tells


@dataclass
class Sandbox:
  """A bwrap launcher. `binds`: {host path: path inside}, read-only."""
  limits: Limits = field(default_factory=Limits)
  binds: dict = field(default_factory=dict)
  env: dict = field(default_factory=dict)
  enabled: bool = True          # False: --no-sandbox (trusted use): plain subprocess
  mode: str = ""                # cgroup-v1 | systemd | rlimits | none

  def __post_init__(self):
    if not self.enabled:
      self.mode = "none"
      return
    why = unavailable()
    if why:
      raise SandboxUnavailable(why)
    self.mode = self.mode or limit_mode()
    self.bwrap, self.prlimit = shutil.which("bwrap"), shutil.which("prlimit")
    self.env_path = shutil.which("env") or "/usr/bin/env"   # `env -i`: nothing reaches bwrap
    self.seccomp = lock_filter()   # no file locks, leases or watches: no channel between runs

  # --- the command line ---------------------------------------------------------------
  def runtime_binds(self) -> list[str]:
    """The runtime, read-only, each where it is on the host: /usr, the Python installation
    and the virtual environment (so paths inside are the paths a notebook sees)."""
    args = []
    for top in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
      p = Path(top)
      if p.is_symlink():
        args += ["--symlink", os.readlink(p), top]
      elif p.is_dir():
        args += ["--ro-bind", top, top]
    for etc in ("/etc/ld.so.cache", "/etc/localtime"):
      if Path(etc).exists():
        args += ["--ro-bind", etc, etc]
    for prefix in {os.path.realpath(sys.base_prefix), sys.prefix}:
      if not prefix.startswith("/usr/"):
        args += ["--ro-bind", prefix, prefix]
    return args

  @property
  def python(self) -> str:
    """The path of this Python, inside the sandbox as outside."""
    return os.path.normpath(os.path.abspath(sys.executable))

  def argv(self, command: list[str], binds: dict, env: dict, files: dict) -> tuple[list, list]:
    """(bwrap's options, the command line after them). The options go to bwrap through a
    file descriptor (`--args`), so that no path or setting of the grader shows in the
    sandbox's /proc/1/cmdline; bwrap itself starts with an empty environment, so
    /proc/1/environ is empty. `files`: {path inside: fd}, copied into the sandbox."""
    lim = self.limits
    env = {"PATH": f"{os.path.dirname(self.python)}:/usr/bin:/bin", "HOME": "/tmp",
           "TMPDIR": "/tmp", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONHASHSEED": "0", **self.env, **env}
    args = ["--unshare-all", "--unshare-user", *(["--disable-userns"] * DISABLE_USERNS), "--uid", "65534",
            "--gid", "65534", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--proc", "/proc", "--dev", "/dev",
            "--size", str(lim.shm_mib << 20), "--tmpfs", "/dev/shm",
            "--size", str(lim.tmp_mib << 20), "--tmpfs", "/tmp",
            *self.runtime_binds()]   # after /tmp: a runtime under /tmp stays visible
    for host, inside in {**self.binds, **binds}.items():
      args += ["--ro-bind", str(host), str(inside)]
    for inside, fd in files.items():
      args += ["--file", str(fd), inside]
    args += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/tmp", "--clearenv"]
    for k, v in env.items():
      args += ["--setenv", k, v]
    return args, ["--", *command]

  def rlimit_argv(self) -> list[str]:
    lim = self.limits
    cpu = math.ceil(lim.cpu_seconds) + 1   # past the whole sandbox's limit, where a cgroup counts it
    args = [self.prlimit, f"--cpu={cpu}:{cpu + 5}",
            f"--fsize={lim.file_mib << 20}", "--core=0"]
    if self.mode == "rlimits":   # no cgroup: per process, and a per-user process count
      args += [f"--as={lim.memory_mib << 20}", f"--nproc={lim.pids}"]
    return args + ["--"]

  # --- running ---------------------------------------------------------------------------
  def run(self, command: list[str], stdin=b"", binds: dict | None = None,
          env: dict | None = None, cwd: str | None = None, files: dict | None = None) -> Result:
    """Run `command` inside a fresh sandbox, with `binds` ({host: inside}, read-only),
    `files` ({inside: host path}, copied in) and `env` added; wait at most
    `limits.timeout` seconds. `stdin`: bytes, or a function of the result descriptor's
    number that gives them (`FD_RESULT` in a sandbox). Without a sandbox (trusted use),
    `command` runs as a plain subprocess in `cwd`, with `env` added to ours."""
    lim = self.limits
    r_fd, w_fd = os.pipe()
    data = stdin(FD_RESULT if self.enabled else w_fd) if callable(stdin) else stdin
    cg = Cgroup(lim) if self.mode == "cgroup-v1" else None
    opened = []
    if self.enabled:
      host_fds = [os.open(host, os.O_RDONLY | os.O_CLOEXEC) for host in (files or {}).values()]
      opened += host_fds
      inside = {dest: FD_FILES + i for i, dest in enumerate(files or {})}
      options, tail = self.argv(command, binds or {}, env or {}, inside)
      child_fds = {FD_RESULT: w_fd, **{FD_FILES + i: fd for i, fd in enumerate(host_fds)}}
      if self.seccomp:
        child_fds[FD_SECCOMP] = _memory_file(self.seccomp)
        opened.append(child_fds[FD_SECCOMP])
        options += ["--seccomp", str(FD_SECCOMP)]
      child_fds[FD_ARGS] = _memory_file(b"".join(a.encode() + b"\0" for a in options))
      opened.append(child_fds[FD_ARGS])
      inner = [self.env_path, "-i", *self.rlimit_argv(), self.bwrap, "--args", str(FD_ARGS), *tail]
      popen_env = {}
    else:
      inner = command
      popen_env = dict(os.environ, **self.env, **(env or {}))
    if cg is not None:
      inner = ["/bin/sh", "-c", f'{cg.enter()} && exec "$@"', "sh", *inner]
    elif self.mode == "systemd":   # systemd-run needs the session's bus; `env -i` drops it
      popen_env = {k: v for k, v in os.environ.items()
                   if k in ("DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR")}
      inner = ["systemd-run", "--user", "--scope", "--quiet", "--collect",
               f"-pMemoryMax={lim.memory_mib}M", "-pMemorySwapMax=0",
               f"-pTasksMax={lim.pids}", f"-pCPUQuota={max(1, round(lim.cpus * 100))}%",
               "--", *inner]
    t0 = time.monotonic()
    try:
      if self.enabled:
        proc = _Spawned(inner, popen_env, child_fds)
      else:
        proc = subprocess.Popen(inner, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, pass_fds=(w_fd,), env=popen_env,
                                cwd=cwd, start_new_session=True)
    except OSError as e:
      for fd in (r_fd, w_fd, *opened):
        os.close(fd)
      if cg:
        cg.remove()
      raise SandboxUnavailable(f"could not start the sandbox: {e}") from None
    for fd in (w_fd, *opened):
      os.close(fd)
    out, res = _Reader(proc.stdout, lim.output_cap), _Reader(os.fdopen(r_fd, "rb"), lim.result_cap)
    try:
      proc.stdin.write(data)
      proc.stdin.close()
    except (BrokenPipeError, OSError):
      pass
    status, wall, used, waited = "ok", False, None, None
    credit = 0.0   # seconds added to the wall-clock bound: what it waited for a CPU
    while True:   # until it ends, its CPU time is spent, or the wall-clock bound
      left = lim.timeout + credit - (time.monotonic() - t0)
      try:
        proc.wait(timeout=max(0.0, min(left, 0.2 if cg else left)))
        break
      except subprocess.TimeoutExpired:
        if left <= 0 and cg and credit < WAIT_CREDIT * lim.timeout:
          # A busy machine's wait is not the sandbox's: its threads' waits for a CPU move
          # the bound, up to WAIT_CREDIT times more (a sleeping program waits for none).
          more = min(cg.waited(), WAIT_CREDIT * lim.timeout) - credit
          if more > 0.05:
            credit += more
            continue
        used = cg.cpu_seconds() if cg else None
        if left <= 0 or (used is not None and used >= lim.cpu_seconds):
          status, wall = "timeout", left <= 0
          waited = cg.waited() if cg else None
          _kill(proc, cg)
          proc.wait()
          break
    if cg:
      used = cg.cpu_seconds()
      cg.kill_all()
      if status == "ok" and used is not None and used >= lim.cpu_seconds:   # spent between two looks (its children too)
        status = "timeout"
    out.join(5)
    res.join(5)
    oom = cg.oom() if cg else False
    if cg:
      cg.remove()
    rc = proc.returncode
    sig = None
    if rc is not None and (rc < 0 or (self.enabled and rc > 128)):
      num = -rc if rc < 0 else rc - 128
      try:
        sig = signal.Signals(num).name
      except ValueError:
        sig = f"signal {num}"
      if status == "ok":
        status = "killed"
    elif status == "ok" and rc != 0:
      status = "exited"
    if sig == "SIGXCPU":   # a process reached its CPU seconds (RLIMIT_CPU)
      status = "timeout"
    return Result(status, rc, sig, oom, out.text(), out.total, res.data(), res.truncated,
                  time.monotonic() - t0, used, wall, waited)


# A sandbox's descriptors, the same in every run (whatever the grader has open, however
# many runs are at once): the result pipe, bwrap's options, the files copied in.
FD_RESULT, FD_ARGS, FD_SECCOMP, FD_FILES = 3, 4, 5, 6


class _Spawned:
  """A process in a new session, started by `os.posix_spawnp` with its descriptors at
  fixed numbers ({child fd: parent fd}; `subprocess` keeps the parent's numbers, and its
  `preexec_fn` is not safe with threads). Stdout and stderr are one pipe. Like Popen:
  `pid`, `stdin`, `stdout`, `wait(timeout)`, `returncode`."""

  def __init__(self, argv, env, fds: dict):
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    fds = {0: in_r, 1: out_w, 2: out_w, **fds}
    spare = max([*fds, *fds.values()]) + 1   # out of the way of every source and target
    actions = [(os.POSIX_SPAWN_DUP2, src, spare + i) for i, src in enumerate(fds.values())]
    actions += [(os.POSIX_SPAWN_DUP2, spare + i, dst) for i, dst in enumerate(fds)]
    actions += [(os.POSIX_SPAWN_CLOSE, spare + i) for i in range(len(fds))]
    try:
      self.pid = os.posix_spawnp(argv[0], argv, env, file_actions=actions, setsid=True)
    finally:
      os.close(in_r)
      os.close(out_w)
    self.stdin, self.stdout = os.fdopen(in_w, "wb"), os.fdopen(out_r, "rb")
    self.returncode = None
    self._done = threading.Event()
    threading.Thread(target=self._reap, daemon=True).start()

  def _reap(self):
    _, status = os.waitpid(self.pid, 0)
    self.returncode = os.waitstatus_to_exitcode(status)
    self._done.set()

  def wait(self, timeout=None):
    if not self._done.wait(timeout):
      raise subprocess.TimeoutExpired(str(self.pid), timeout)
    return self.returncode


def _memory_file(data: bytes) -> int:
  """A descriptor of an unnamed file holding `data`, read from its start."""
  if hasattr(os, "memfd_create"):
    fd = os.memfd_create("coursekit")
  else:
    import tempfile
    fd, path = tempfile.mkstemp()
    os.unlink(path)
  os.write(fd, data)
  os.lseek(fd, 0, os.SEEK_SET)
  return fd


class _Reader(threading.Thread):
  """Reads a stream to its end, keeping at most `cap` bytes."""

  def __init__(self, stream, cap):
    super().__init__(daemon=True)
    self.stream, self.cap, self.chunks, self.total, self.truncated = stream, cap, [], 0, False
    self.start()

  def run(self):
    try:
      while chunk := self.stream.read1(65536) if hasattr(self.stream, "read1") else \
          self.stream.read(65536):
        keep = max(0, min(len(chunk), self.cap - self.total))
        if keep:
          self.chunks.append(chunk[:keep])
        if keep < len(chunk):
          self.truncated = True
        self.total += len(chunk)
    except (OSError, ValueError):
      pass
    finally:
      try:
        self.stream.close()
      except OSError:
        pass

  def data(self) -> bytes:
    return b"".join(self.chunks)

  def text(self) -> str:
    return self.data().decode("utf-8", "replace")


def _kill(proc, cg):
  try:
    os.killpg(proc.pid, signal.SIGKILL)
  except (ProcessLookupError, PermissionError):
    pass
  if cg:
    cg.kill_all()


def unavailable() -> str | None:
  """Why bwrap can't sandbox here (None if it can)."""
  global DISABLE_USERNS
  if shutil.which("bwrap") is None:
    return ("bubblewrap (bwrap) is not installed: install it (Debian/Ubuntu: "
            "`apt-get install bubblewrap`) or, for trusted notebooks only, pass --no-sandbox")
  if shutil.which("prlimit") is None:
    return "prlimit (util-linux) is not installed"
  base = ["bwrap", "--unshare-all", "--unshare-user", "--uid", "65534", "--ro-bind", "/", "/"]
  try:
    p = subprocess.run(base + ["--", "/bin/true"], capture_output=True, timeout=20)
    if p.returncode == 0:
      DISABLE_USERNS = subprocess.run(base[:3] + ["--disable-userns"] + base[3:] + ["--", "/bin/true"],
                                      capture_output=True, timeout=20).returncode == 0
  except (OSError, subprocess.TimeoutExpired) as e:
    return f"bwrap could not run: {e}"
  if p.returncode != 0:
    err = p.stderr.decode(errors="replace").strip()
    return (f"bwrap can't create a sandbox here ({err}); unprivileged user namespaces may be "
            f"disabled (sysctl kernel.unprivileged_userns_clone=1), or pass --no-sandbox "
            f"for trusted notebooks only")
  return None


MODE_TEXT = {
    "cgroup-v1": "bubblewrap sandbox; memory, process and CPU limits, and CPU time, for each "
                 "whole sandbox (cgroup v1)",
    "systemd": "bubblewrap sandbox; memory, process and CPU limits for each whole sandbox "
               "(systemd-run --user --scope); CPU time per process (rlimits)",
    "rlimits": "bubblewrap sandbox; NO cgroup here: memory and CPU time are limited per "
               "process and the process count per user (rlimits), not per sandbox",
    "none": "NO SANDBOX (--no-sandbox): the notebooks ran with the grader's own rights; "
            "use this only for trusted notebooks",
}


def mode_text(mode: str) -> str:
  """How this machine sandboxes, for the report."""
  text = MODE_TEXT[mode]
  if mode != "none" and not DISABLE_USERNS:
    text += ("; this bwrap (< 0.8) can't forbid nested user namespaces inside the sandbox: "
             "upgrade bubblewrap")
  return text


if __name__ == "__main__":   # a quick self-test: python -m coursekit.grader.sandbox
  sb = Sandbox()
  r = sb.run([sb.python, "-c", "import os, sys; print(os.getuid()); "
              "os.write(int(sys.stdin.read()), b'ok')"], stdin=lambda fd: str(fd).encode())
  print(json.dumps({"mode": sb.mode, "status": r.status, "output": r.output,
                    "result": r.result.decode()}))
