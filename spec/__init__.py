"""tspec: a symbolic, shape-checked specification of the Transformer.

    from tspec import load, check, grid, diff
    report = check(load("base"))          # a built-in variant, a .toml or a .tspec path
    print(report.ok, [f.text() for f in report.findings])
    table = grid("base", {"d_model": range(256, 1025, 64), "H": [4, 8, 12, 16]})
    print(table.summary(), [p.dims for p in table.points("invalid")])
    print(diff("gpt2_small", "gpt2_medium").text())
"""

if __name__ != "tspec":          # the checkout's spec/ folder imported as a top-level package
    raise ImportError("spec/ is the source folder of the tspec package: import tspec")

from tspec.api import (
    Diff,
    Grid,
    Report,
    ShapeRow,
    builtin_specs,
    builtin_variants,
    check,
    diff,
    grid,
    load,
    read_spec,
    shapes,
)
from tspec.checking.findings import Finding
from tspec.errors import (
    GridError,
    SpecError,
    SpecSyntaxError,
    TspecError,
    UsageError,
    VariantError,
)
from tspec.language.parser import parse, parse_file
from tspec.language.variant import Variant

__all__ = ["Diff", "Finding", "Grid", "GridError", "Report", "ShapeRow", "SpecError",
           "SpecSyntaxError", "TspecError", "UsageError", "Variant", "VariantError",
           "builtin_specs", "builtin_variants", "check", "diff", "grid", "load", "parse",
           "parse_file", "read_spec", "shapes"]
