"""Test-run settings shared by every test module, and the fixtures more than one uses.

Property tests (hypothesis) draw the same examples on every run, so that a run's result
depends on the code alone: CI starts from a fresh checkout, where a newly drawn failing example
would block a change that has nothing to do with it. ``TSPEC_HYPOTHESIS=explore`` draws new
examples each run (and keeps failing ones in .hypothesis/ to replay), for looking for bugs.
"""

import os
import sys

import pytest
from hypothesis import settings
from support.command_line import ROOT

settings.register_profile("deterministic", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("TSPEC_HYPOTHESIS", "deterministic"))

# knobs of the generated runtime (codegen/templates/helpers) and their defaults
RUNTIME_KNOBS = {"QUERY_BLOCK": 32, "LONG_QUERY_AXIS": 32, "PIECE_SIZE": 1 << 17,
                 "PARALLEL_MIN_WORK": 1 << 18, "WORKSPACE_LIMIT": 1 << 28}


@pytest.fixture(autouse=True)
def shared_runtimes_keep_their_knobs():
    """The models of a folder share its runtime (generated/numpy/_runtime.py, the loader's
    cache): a test changes the knobs of one that others share only through monkeypatch,
    which puts them back, and loads a runtime of its own (private=True) to change more."""
    yield
    for name, module in list(sys.modules.items()):
        package = sys.modules.get(name.rpartition(".")[0])
        if name.endswith("._runtime") and not getattr(package, "private", False):
            changed = {knob: getattr(module, knob) for knob, default in RUNTIME_KNOBS.items()
                       if getattr(module, knob, default) != default}
            assert changed == {}, f"the test left {name} changed: {changed}"


@pytest.fixture
def in_checkout(monkeypatch):
    """The checkout as the working directory, so that the paths commands print are relative to
    it (a module asks for it with ``pytestmark = pytest.mark.usefixtures("in_checkout")``)."""
    monkeypatch.chdir(ROOT)
