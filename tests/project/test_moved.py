"""Modules that moved keep their old import paths (tspec.moved): a module imported by its old
name is the very module at the new one, so that a script that imported or patched it there
still works. The README named tspec.codegen.execution's checkpoints, loading and weights."""

import importlib
import subprocess
import sys

import pytest

import tspec
from tspec import moved

MODULES = {"tspec.codegen.execution": ["checkpoint_files", "checkpoints", "loading", "run",
                                       "weights"],
           "tspec.codegen.docs": ["comparisons", "diagram", "markup", "scaling", "site"]}
# modules moved one by one: old name -> new name
SINGLES = {"tspec.language.expr": "tspec.symbolic.expr",
           "tspec.language.shape": "tspec.symbolic.shape",
           "tspec.checking.audit": "tspec.audit"}


@pytest.mark.parametrize("old, name", [(old, name) for old, names in MODULES.items()
                                       for name in names])
def test_a_moved_module_is_the_same_module_by_its_old_name(old, name):
    new = moved.MOVED[old]
    module = importlib.import_module(f"{old}.{name}")
    assert module is importlib.import_module(f"{new}.{name}")
    assert module.__name__ == module.__spec__.name == f"{new}.{name}"
    assert importlib.import_module(old) is importlib.import_module(new)
    assert getattr(importlib.import_module(old), name) is module


@pytest.mark.parametrize("old, new", SINGLES.items())
def test_a_moved_module_is_found_by_its_old_name_in_a_fresh_interpreter(old, new):
    # a fresh process: the old name must work with nothing of tspec imported before it
    code = (f"import importlib; old = importlib.import_module({old!r}); "
            f"new = importlib.import_module({new!r}); "
            "print(old is new, old.__name__, any(hasattr(old, n) for n in ('Shape', 'dim_text', 'render')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.split() == ["True", new, "True"]


def test_the_readmes_old_calls_still_work(tmp_path):
    from tspec.codegen.execution import checkpoints, loading, weights
    from tspec.codegen.execution.weights import WeightsError
    assert WeightsError is tspec.WeightsError
    assert checkpoints.from_llama is importlib.import_module("tspec.execution.checkpoints") \
        .from_llama
    path = tmp_path / "w.npz"
    weights.save(path, {"E": __import__("numpy").ones((2, 3), "float32")})
    assert weights.load(path, {"E": (2, 3)})["E"].shape == (2, 3)
    assert callable(loading.load_module)


def test_a_name_below_a_moved_package_that_does_not_exist_is_not_found():
    with pytest.raises(ModuleNotFoundError, match="No module named 'tspec.execution.nothing'"):
        importlib.import_module("tspec.codegen.execution.nothing")
