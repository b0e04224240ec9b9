"""The test suite's layout: every test module in the folder of its layer, and none that imports
or reads another (what two modules share lives in tests/support, fixtures in conftest.py)."""

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
LAYERS = ["language", "importing", "checking", "analysis", "codegen", "execution", "docs", "cli", "project"]


def modules() -> list[Path]:
    return sorted(TESTS.rglob("test_*.py"))


def test_every_test_module_is_in_the_folder_of_a_layer():
    elsewhere = [path.relative_to(TESTS).as_posix() for path in modules()
                 if path.parent.parent != TESTS or path.parent.name not in LAYERS]
    assert elsewhere == []


def uses(path: Path, names: set[str]) -> list[str]:
    """What ``path`` takes from the test modules ``names`` or conftest: imports, and the names
    in strings that are not docstrings (a file read or loaded by its path, a module imported by
    its name)."""
    tree = ast.parse(path.read_text())
    prose = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names
                      if alias.name.split(".")[0] in names | {"conftest"}]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and \
                node.module.split(".")[0] in names | {"conftest"}:
            found.append(node.module)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                id(node) not in prose:
            found += [name for name in re.findall(r"\w+", node.value) if name in names]
    return found


def test_no_test_module_imports_or_reads_another():
    names = {path.stem for path in modules()}
    taken = {path.relative_to(TESTS).as_posix(): uses(path, names - {path.stem})
             for path in sorted(TESTS.rglob("*.py"))}
    assert {path: found for path, found in taken.items() if found} == {}
