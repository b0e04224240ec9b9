"""Imports point one way, as far as the layers have been put in order so far (issue 33): the
language imports nothing that checks, costs, runs, documents or generates a spec, and code
generation never imports the API or the command line. Every import counts, those inside a
function too."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# a folder's modules, and the tspec packages and modules none of them may import
RULES = [
    (ROOT / "spec" / "language", ("tspec.checking", "tspec.analysis", "tspec.execution",
                                  "tspec.docs", "tspec.codegen", "tspec.api", "tspec.cli",
                                  "tspec.importing")),
    (ROOT / "codegen", ("tspec.api", "tspec.cli")),
]


def imported(path: Path) -> list[tuple[int, str]]:
    """Every module a file imports, absolute, with its line (``from tspec import api`` is
    tspec.api)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


@pytest.mark.parametrize("folder, forbidden", RULES, ids=lambda v: getattr(v, "name", ""))
def test_a_layer_imports_nothing_above_it(folder, forbidden):
    wrong = [f"{path.relative_to(ROOT)}:{line}: {name}"
             for path in sorted(folder.rglob("*.py")) for line, name in imported(path)
             if any(name == f or name.startswith(f + ".") for f in forbidden)]
    assert wrong == []


def test_the_rule_sees_an_import_inside_a_function(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("def f():\n    from tspec import api\n    import tspec.cli\n")
    assert imported(path) == [(2, "tspec.api"), (3, "tspec.cli")]
