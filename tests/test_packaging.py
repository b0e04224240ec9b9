"""What a plain (non-editable) install carries: one import package, tspec, made of every
package folder of the checkout and the data files the code reads at run time, and one version
(tests/test_wheel.py builds and installs the wheel)."""

import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from command_line import ROOT

import tspec

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]
DATA = SETUPTOOLS["package-data"]
DIRS = SETUPTOOLS["package-dir"]            # import package -> folder of the checkout


@pytest.mark.parametrize("package, suffixes", [
    ("tspec.codegen", (".j2",)),
    ("tspec", (".tspec", ".toml")),
])
def test_every_data_file_is_declared_as_package_data(package, suffixes):
    base = ROOT / DIRS[package]
    files = [p for p in base.rglob("*") if p.suffix in suffixes]
    assert files
    missing = [str(p.relative_to(base)) for p in files
               if not any(p.relative_to(base).match(pattern) and
                          len(p.relative_to(base).parts) == len(Path(pattern).parts)
                          for pattern in DATA[package])]
    assert missing == []


PACKAGES = SETUPTOOLS["packages"]


def folder_of(package: str) -> Path:
    """The checkout folder setuptools' package-dir maps an import package to."""
    parts = package.split(".")
    for length in range(len(parts), 0, -1):
        if ".".join(parts[:length]) in DIRS:
            return ROOT / DIRS[".".join(parts[:length])] / Path(*parts[length:])
    return ROOT / Path(*parts)


def test_every_package_folder_is_listed():
    # before: packages = ["spec", "codegen", "generated"], and the wheel had no generated/numpy
    folders = {path.parent for top in ("spec", "codegen", "generated")
               for path in (ROOT / top).rglob("__init__.py")}
    assert folders == {folder_of(package) for package in PACKAGES}
    assert all((folder_of(package) / "__init__.py").is_file() for package in PACKAGES)
    assert {package.split(".")[0] for package in PACKAGES} == {"tspec"}


@pytest.mark.parametrize("name, package", [
    ("spec", "the tspec package: import tspec"),
    ("codegen", "tspec.codegen: import tspec.codegen"),
    ("generated", "tspec.generated: import tspec.generated"),
])
def test_the_checkout_folders_are_not_packages(name, package):
    """Nothing generic is importable, not even from the checkout: no second copy of a module
    under another name (with its own classes, so that an error raised by one is not caught as
    the other's)."""
    result = subprocess.run([sys.executable, "-c", f"import {name}"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (f"ImportError: {name}/ is the source folder of "
                                              f"{package}")
    assert name not in sys.modules


def test_version_is_one_number():
    shown = subprocess.run([sys.executable, "-m", "tspec", "--version"], capture_output=True,
                           text=True, cwd=ROOT, timeout=60, check=False)
    assert (shown.returncode, shown.stdout, shown.stderr) == (0, f"tspec {tspec.__version__}\n",
                                                              "")
    assert importlib.metadata.version("tspec") == tspec.__version__, \
        "the installed metadata is older: pip install -e '.[test]' again"
    assert PROJECT["dynamic"] == ["version"] and "version" not in PROJECT
    assert SETUPTOOLS["dynamic"]["version"] == {"attr": "tspec.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", tspec.__version__)


def test_the_package_says_it_is_typed():
    assert (ROOT / "spec" / "py.typed").is_file()
    assert "py.typed" in DATA["tspec"]
    assert "Typing :: Typed" in PROJECT["classifiers"]
