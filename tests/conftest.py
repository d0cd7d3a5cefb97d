"""Shared test setup: real JAX as the oracle (with x64, like autodidax), a
hypothesis profile, and a check that every test leaves the interpreter stack
as it found it."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

from autodidax import core  # noqa: E402

jax.config.update("jax_enable_x64", True)

# "ci" (the default) is derandomized so that runs are reproducible; "dev"
# explores new examples on each run, "thorough" many more (bug hunting). Pick
# one with HYPOTHESIS_PROFILE=dev or --hypothesis-profile=dev. A failure
# prints a blob for @reproduce_failure. The program tests are 9 tests x 40
# examples: 360 per run.
_common = dict(deadline=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                      HealthCheck.filter_too_much])
settings.register_profile("ci", max_examples=40, derandomize=True, **_common)
settings.register_profile("dev", max_examples=40, **_common)
settings.register_profile("thorough", max_examples=400, **_common)   # bug hunting
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def stack_is_clean() -> bool:
  return (len(core.trace_stack) == 1 and core.trace_stack[0].level == 0
          and core.trace_stack[0].trace_type is core.EvalTrace
          and core.dynamic_trace is None)


@pytest.fixture(autouse=True)
def clean_interpreter_stack():
  """Fail a test that leaves an interpreter on the stack (or a dynamic trace)."""
  assert stack_is_clean(), f"stack dirty before the test: {core.trace_stack}"
  bottom = core.trace_stack[0]
  yield
  assert core.trace_stack == [bottom] and core.trace_stack[0] is bottom, (
      f"the test left the interpreter stack as {core.trace_stack}")
  assert core.dynamic_trace is None, f"the test left dynamic_trace={core.dynamic_trace}"
  hooks = core.hooks
  assert hooks.design is core.levels and not hooks.observers, (
      f"the test left bind hooks on: {hooks.design}, {hooks.observers}")
