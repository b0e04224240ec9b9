"""What a plain (non-editable) install carries: every data file the code reads at run time
must match the package data that pyproject.toml declares."""

import tomllib
from pathlib import Path

import pytest
from command_line import ROOT

SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
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
