"""Test-run settings shared by every test module, and the fixtures more than one uses.

Property tests (hypothesis) draw the same examples on every run, so that a run's result
depends on the code alone: CI starts from a fresh checkout, where a newly drawn failing example
would block a change that has nothing to do with it. ``TSPEC_HYPOTHESIS=explore`` draws new
examples each run (and keeps failing ones in .hypothesis/ to replay), for looking for bugs.
"""

import os

import pytest
from hypothesis import settings
from support.command_line import ROOT

settings.register_profile("deterministic", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("TSPEC_HYPOTHESIS", "deterministic"))


@pytest.fixture
def in_checkout(monkeypatch):
    """The checkout as the working directory, so that the paths commands print are relative to
    it (a module asks for it with ``pytestmark = pytest.mark.usefixtures("in_checkout")``)."""
    monkeypatch.chdir(ROOT)
