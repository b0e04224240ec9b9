"""Imports point one way (issue 33): each package of tspec sits in a layer, and a module
imports nothing from a layer above its own, nor from a package of its own layer that imports
it back. Every import counts, those inside a function too.

    symbolic (and errors, numbers, files, inputs)  ->  ops  ->  language  ->  checking
    ->  analysis, importing  ->  codegen  ->  execution  ->  api  ->  docs, audit  ->  cli

The language's reader stands on the op catalogue (an equation names its ops), so the shape
algebra both use sits beneath them, in tspec.symbolic.
"""

import ast
import itertools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {"spec": "tspec", "codegen": "tspec.codegen"}

LAYERS = [
    ["tspec.symbolic", "tspec.errors", "tspec.numbers", "tspec.files", "tspec.inputs",
     "tspec.moved"],
    ["tspec.ops"],
    ["tspec.language"],
    ["tspec.checking", "tspec.shipped"],
    ["tspec.analysis", "tspec.importing"],
    ["tspec.codegen"],
    ["tspec.execution"],
    ["tspec.api"],
    ["tspec.docs", "tspec.audit"],
    ["tspec.cli", "tspec.__main__", "tspec"],
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


def unit(name: str) -> str | None:
    """The package or module of LAYERS that a tspec name belongs to (the longest that fits);
    None outside tspec."""
    fits = [u for layer in LAYERS for u in layer if name == u or name.startswith(u + ".")]
    return max(fits, key=len) if fits else None


def rank(name: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if unit(name) in layer)


def module_name(path: Path) -> str:
    folder, *rest = path.relative_to(ROOT).with_suffix("").parts
    parts = [FOLDERS[folder], *rest]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def edges() -> list[tuple[str, str, str]]:
    """(importing unit, imported unit, where) for every import of one unit by another."""
    found = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            own = unit(module_name(path))
            for line, name in imported(path):
                other = unit(name)
                if other is not None and other != own and own != "tspec" and other != "tspec":
                    found.append((own, other, f"{path.relative_to(ROOT)}:{line}: {name}"))
    return found


def test_every_module_has_a_layer():
    names = [module_name(p) for folder in FOLDERS for p in (ROOT / folder).rglob("*.py")]
    assert [n for n in names if unit(n) is None] == []


def test_a_layer_imports_nothing_above_it():
    wrong = [where for own, other, where in edges() if rank(other) > rank(own)]
    assert wrong == []


def test_no_two_units_of_a_layer_import_each_other():
    pairs = {(own, other) for own, other, _ in edges() if rank(own) == rank(other)}
    assert sorted(p for p in pairs if p[::-1] in pairs) == []


def test_the_package_imports_only_what_it_names():
    # tspec/__init__.py maps its public names to the modules defining them, imported on use
    path = ROOT / "spec" / "__init__.py"
    assert {unit(name) for _, name in imported(path) if unit(name)} <= {"tspec.moved",
                                                                       "tspec.api",
                                                                       "tspec.checking",
                                                                       "tspec.errors",
                                                                       "tspec.execution",
                                                                       "tspec.language",
                                                                       "tspec.importing"}


def test_the_rule_sees_an_import_inside_a_function(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("def f():\n    from tspec import api\n    import tspec.cli\n")
    assert imported(path) == [(2, "tspec.api"), (3, "tspec.cli")]


def test_the_layers_name_each_unit_once():
    units = list(itertools.chain(*LAYERS))
    assert len(units) == len(set(units))


@pytest.mark.parametrize("name, expected", [("tspec.codegen.lowering.body", "tspec.codegen"),
                                            ("tspec.symbolic.shape.Shape", "tspec.symbolic"),
                                            ("tspec.api", "tspec.api"), ("numpy", None)])
def test_a_name_belongs_to_its_longest_unit(name, expected):
    assert unit(name) == expected
