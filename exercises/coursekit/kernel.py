"""Run code cells in a fresh, resource-limited Jupyter kernel, one at a time.

The grader's kernel driver. Compared with running nbval, it notices a dead
kernel at once (instead of waiting out the cell timeout), enforces a deadline
for the whole notebook as well as one per cell, keeps at most `max_output`
characters of each cell's output, and can call the in-kernel guard
(`coursekit.guard`) between cells through `user_expressions`, out of band.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from queue import Empty

from jupyter_client import KernelManager
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager

INTERRUPT_GRACE = 5.0   # seconds a timed-out cell gets to stop after SIGINT


@dataclass
class CellRun:
  """What running one cell did."""
  status: str                       # ok | error | timeout | died | skipped
  error: str | None = None          # "EName: value" of the error it raised
  outputs: list = field(default_factory=list)   # [(kind, text)], streams coalesced
  truncated: bool = False           # outputs were longer than max_output
  why: str = ""                     # for died/skipped/timeout: what happened


class _SandboxSpecs(KernelSpecManager):
  """One kernel spec: this Python's ipykernel, started by coursekit.sandbox."""

  def get_kernel_spec(self, kernel_name):
    return KernelSpec(argv=[sys.executable, "-m", "coursekit.sandbox", sys.executable, "-m",
                            "ipykernel_launcher", "-f", "{connection_file}"],
                      display_name="coursekit sandbox", language="python", env={})


def _death(code) -> str:
  if code is None:
    return "the kernel died"
  if code < 0:
    sig = -code
    name = {signal.SIGXCPU: "SIGXCPU: its CPU time limit was reached",
            signal.SIGKILL: "SIGKILL: killed (out of memory, or the CPU hard limit)",
            signal.SIGXFSZ: "SIGXFSZ: it wrote a file past the size limit",
            signal.SIGSEGV: "SIGSEGV: it crashed"}.get(sig, signal.Signals(sig).name)
    return f"the kernel died ({name})"
  return f"the kernel exited with status {code}"


class Kernel:
  """A kernel in `cwd`, its environment `env`, under `rlimits` (see sandbox.py)."""

  def __init__(self, cwd: str, env: dict, rlimits: dict, startup_timeout: float = 60):
    env = dict(env, COURSEKIT_RLIMITS=json.dumps(rlimits))
    self.km = KernelManager(kernel_name="coursekit-sandbox", kernel_spec_manager=_SandboxSpecs())
    self.km.start_kernel(cwd=cwd, env=env, stderr=open(os.devnull, "w"))
    self.kc = self.km.client()
    self.kc.start_channels()
    self.dead: str | None = None
    try:
      self.kc.wait_for_ready(timeout=startup_timeout)
    except RuntimeError as e:
      self.stop()
      raise RuntimeError(f"the kernel did not start: {e}") from None

  def alive(self) -> bool:
    if self.dead:
      return False
    if not self.km.is_alive():
      proc = getattr(self.km.provisioner, "process", None)
      self.dead = _death(proc.poll() if proc is not None else None)
      return False
    return True

  def stop(self):
    try:
      self.kc.stop_channels()
    finally:
      try:
        self.km.shutdown_kernel(now=True)
      except Exception:  # noqa: BLE001 (already gone)
        pass

  def _reply(self, msg_id, until: float):
    while time.monotonic() < until:
      try:
        msg = self.kc.get_shell_msg(timeout=min(0.5, max(until - time.monotonic(), 0.01)))
      except Empty:
        if not self.alive():
          return None
        continue
      if msg["parent_header"].get("msg_id") == msg_id:
        return msg["content"]
    return None

  def expression(self, expr: str, timeout: float = 30) -> str | None:
    """Evaluate `expr` in the notebook's namespace, silently; its repr, or None."""
    if not self.alive():
      return None
    msg_id = self.kc.execute("", silent=True, store_history=False,
                             user_expressions={"r": expr})
    content = self._reply(msg_id, time.monotonic() + timeout)
    if not content:
      return None
    r = content.get("user_expressions", {}).get("r", {})
    if r.get("status") != "ok":
      return None
    return r.get("data", {}).get("text/plain")

  def run(self, code: str, timeout: float, deadline: float, max_output: int) -> CellRun:
    """Run one cell; stop it at `timeout` seconds or at the `deadline` (monotonic)."""
    if not self.alive():
      return CellRun("skipped", why=self.dead)
    if time.monotonic() >= deadline:
      return CellRun("skipped", why="the submission's time limit was reached")
    msg_id = self.kc.execute(code, store_history=True, allow_stdin=False, stop_on_error=False)
    end = min(time.monotonic() + timeout, deadline)
    res, size = CellRun("ok"), 0
    streams: dict = {}   # name -> [text], coalesced at the end

    def add(kind, text):
      nonlocal size
      room = max_output - size
      size += len(text)
      if room <= 0:
        res.truncated = True
        return
      if len(text) > room:
        text, res.truncated = text[:room], True
      if kind.startswith("stream:"):
        streams.setdefault(kind, []).append(text)
        if res.outputs and res.outputs[-1][0] == kind:
          return
        res.outputs.append((kind, None))
      else:
        res.outputs.append((kind, text))

    interrupted_at = None
    while True:
      now = time.monotonic()
      if interrupted_at is None and now >= end:
        interrupted_at = now
        res.status = "timeout"
        res.why = "the submission's time limit was reached" if deadline <= now else ""
        try:
          self.km.interrupt_kernel()
        except Exception:  # noqa: BLE001
          pass
      if interrupted_at is not None and now >= interrupted_at + INTERRUPT_GRACE:
        self.dead = "the kernel was stopped: it did not respond to an interrupt after a timeout"
        self.stop()
        break
      wait = (interrupted_at + INTERRUPT_GRACE if interrupted_at is not None else end) - now
      try:
        msg = self.kc.get_iopub_msg(timeout=min(0.5, max(wait, 0.01)))
      except Empty:
        if not self.alive():
          res.status, res.why = "died", self.dead
          break
        continue
      if msg["parent_header"].get("msg_id") != msg_id:
        continue
      kind, content = msg["msg_type"], msg["content"]
      if kind == "status" and content["execution_state"] == "idle":
        break
      if kind == "stream":
        add(f"stream:{content['name']}", content["text"])
      elif kind in ("display_data", "execute_result"):
        add(kind, str(content.get("data", {}).get("text/plain", "")))
      elif kind == "error":
        res.error = f"{content['ename']}: {content['evalue']}"
        if res.status == "ok":
          res.status = "error"
    res.outputs = [(k, "".join(streams[k]) if t is None else t) for k, t in res.outputs]
    if res.status in ("ok", "error", "timeout") and self.alive():
      self._reply(msg_id, time.monotonic() + 5)   # drain the shell reply
    return res
