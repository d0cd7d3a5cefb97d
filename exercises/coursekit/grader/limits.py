"""What bounds a sandbox besides bubblewrap's namespaces, outside it: one run's cgroups
(v1: memory, processes, CPU quota and CPU time, `Cgroup`), how this machine enforces
whole-sandbox limits (`limit_mode`), and the seccomp filter that leaves no channel
between sandboxes (`lock_filter`). `sandbox.Sandbox` applies them to each run.
"""
from __future__ import annotations

import itertools
import os
import platform
import shutil
import signal
import struct
import subprocess
import time
from pathlib import Path

CGROUP_V1 = Path("/sys/fs/cgroup")
_counter = itertools.count()


class Cgroup:
  """One run's cgroups (v1): memory and pids limits, and, where this machine has those
  controllers, a CPU quota and a share equal to every other sandbox's (`cpu`), and the
  count of its CPU time (`cpuacct`)."""

  def __init__(self, lim):   # a sandbox.Limits
    name = f"coursekit-{os.getpid()}-{next(_counter)}"
    self.dirs: dict[str, Path] = {}
    made = set()
    for c in ("memory", "pids", "cpu", "cpuacct"):
      top = CGROUP_V1 / c
      if c in ("cpu", "cpuacct") and not os.access(top, os.W_OK):
        continue
      d = Path(os.path.realpath(top)) / name   # cpu and cpuacct may be one hierarchy
      if d not in made:
        d.mkdir()
        made.add(d)
      self.dirs[c] = d
    self.memory, self.pids = self.dirs["memory"], self.dirs["pids"]
    limit = str(lim.memory_mib << 20)
    (self.memory / "memory.limit_in_bytes").write_text(limit)
    sw = self.memory / "memory.memsw.limit_in_bytes"
    if sw.exists():
      try:
        sw.write_text(limit)
      except OSError:
        pass
    (self.pids / "pids.max").write_text(str(lim.pids))
    if "cpu" in self.dirs:
      period = int((self.dirs["cpu"] / "cpu.cfs_period_us").read_text())
      (self.dirs["cpu"] / "cpu.cfs_quota_us").write_text(str(max(1000, int(lim.cpus * period))))

  @property
  def unique(self) -> list[Path]:
    return sorted(set(self.dirs.values()))

  def enter(self) -> str:
    """Shell that moves the shell itself into every cgroup of the run."""
    return " && ".join(f"echo $$ > {d}/cgroup.procs" for d in self.unique)

  def cpu_seconds(self) -> float | None:
    """The run's CPU time so far, all its processes together (None: not counted here)."""
    if "cpuacct" not in self.dirs:
      return None
    try:
      return int((self.dirs["cpuacct"] / "cpuacct.usage").read_text()) / 1e9
    except (OSError, ValueError):
      return None

  def waited(self) -> float:
    """Seconds its live threads have spent runnable but waiting for a CPU (schedstat)."""
    total = 0
    for pid in self.procs():
      try:
        for task in os.listdir(f"/proc/{pid}/task"):
          with open(f"/proc/{pid}/task/{task}/schedstat") as f:
            total += int(f.read().split()[1])
      except (OSError, ValueError, IndexError):
        pass
    return total / 1e9

  def procs(self) -> list[int]:
    pids = set()
    for cg in self.unique:
      try:
        pids |= {int(p) for p in (cg / "cgroup.procs").read_text().split()}
      except OSError:
        pass
    return sorted(pids)

  def kill_all(self):
    for _ in range(50):
      pids = self.procs()
      if not pids:
        return
      for pid in pids:
        try:
          os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
          pass
      time.sleep(0.02)

  def oom(self) -> bool:
    try:
      text = (self.memory / "memory.oom_control").read_text()
      for line in text.splitlines():
        if line.startswith("oom_kill ") and int(line.split()[1]) > 0:
          return True
      return int((self.memory / "memory.failcnt").read_text()) > 0 and "under_oom 1" in text
    except (OSError, ValueError):
      return False

  def remove(self):
    self.kill_all()
    for cg in self.unique:
      for _ in range(50):
        try:
          cg.rmdir()
          break
        except FileNotFoundError:
          break
        except OSError:
          time.sleep(0.02)


def limit_mode() -> str:
  """How whole-sandbox limits are enforced here: cgroup-v1, systemd or rlimits."""
  if os.geteuid() == 0 and all(os.access(CGROUP_V1 / c, os.W_OK) for c in ("memory", "pids")) \
      and (CGROUP_V1 / "memory" / "memory.limit_in_bytes").exists():
    return "cgroup-v1"
  if shutil.which("systemd-run") and os.environ.get("DBUS_SESSION_BUS_ADDRESS"):
    try:
      p = subprocess.run(["systemd-run", "--user", "--scope", "--quiet", "-pTasksMax=8",
                          "--", "/bin/true"], capture_output=True, timeout=20)
      if p.returncode == 0:
        return "systemd"
    except (OSError, subprocess.TimeoutExpired):
      pass
  return "rlimits"


# --- No channel between sandboxes: a seccomp filter --------------------------------------------
# Every sandbox sees the same read-only files (the runtime). A lock on one of them (flock, or
# fcntl's record locks, which F_GETLK reads from elsewhere), a lease on one, or a watch on
# one (inotify, fanotify: another sandbox opening it is an event) is a channel from one
# sandbox to another. The filter makes those calls fail with ENOLCK (locks) or EPERM.
_ENOLCK, _EPERM = 37, 1
# fcntl commands: F_GETLK, F_SETLK, F_SETLKW, F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW,
# F_SETLEASE, F_GETLEASE, F_NOTIFY (and their 64-bit variants on i386: 12, 13, 14)
_LOCK_COMMANDS = (5, 6, 7, 36, 37, 38, 1024, 1025, 1026, 12, 13, 14)
_SYSCALLS = {   # audit arch: ({locking syscall: errno}, (fcntl numbers))
    "x86_64": (0xC000003E, {73: _ENOLCK, 253: _EPERM, 294: _EPERM, 300: _EPERM}, (72,)),
    "i386": (0x40000003, {143: _ENOLCK, 291: _EPERM, 332: _EPERM, 338: _EPERM}, (55, 221)),
    "aarch64": (0xC00000B7, {32: _ENOLCK, 26: _EPERM, 262: _EPERM}, (25,)),
}


def lock_filter() -> bytes | None:
  """A classic BPF program for bwrap's `--seccomp` that denies file locks, leases and file
  watches, on this machine's architecture (x86_64 with its i386 calls, or aarch64); any
  other architecture's calls fail. None where the architecture is none of those."""
  native = platform.machine()
  if native not in ("x86_64", "aarch64"):
    return None
  arches = [native] + (["i386"] if native == "x86_64" else [])
  LD, JEQ, JSET, RET = 0x20, 0x15, 0x45, 0x06   # BPF_LD|W|ABS, BPF_JMP|JEQ|K, JSET, BPF_RET|K
  ALLOW, ERRNO = 0x7FFF0000, 0x00050000
  prog = []   # (code, jt, jf, k); jumps are relative, filled in as the blocks are laid out

  def block(arch):
    audit, calls, fcntls = _SYSCALLS[arch]
    out = [(LD, 0, 0, 0)]   # nr
    if arch == "x86_64":    # the x32 ABI's calls: none of ours
      out.append((JSET, 0, 1, 0x40000000))
      out.append((RET, 0, 0, ERRNO | _EPERM))
    for nr, errno in calls.items():
      out += [(JEQ, 0, 1, nr), (RET, 0, 0, ERRNO | errno)]
    checks = [(LD, 0, 0, 24)]   # args[1], its low 32 bits (little-endian): fcntl's command
    for cmd in _LOCK_COMMANDS:
      checks += [(JEQ, 0, 1, cmd), (RET, 0, 0, ERRNO | _ENOLCK)]
    checks.append((RET, 0, 0, ALLOW))
    for nr in fcntls:
      out.append((JEQ, 0, 0, nr))   # jt set below: to `checks`
    out.append((RET, 0, 0, ALLOW))
    first = len(out) - 1 - len(fcntls)
    for i in range(len(fcntls)):
      code, _, jf, k = out[first + i]
      out[first + i] = (code, len(out) - (first + i) - 1, jf, k)
    return out + checks

  blocks = [(_SYSCALLS[a][0], block(a)) for a in arches]
  prog.append((LD, 0, 0, 4))   # arch
  for audit, body in blocks:
    prog += [(JEQ, 0, len(body), audit), *body]
  prog.append((RET, 0, 0, ERRNO | _EPERM))   # an architecture we don't know
  return b"".join(struct.pack("=HBBI", *ins) for ins in prog)
