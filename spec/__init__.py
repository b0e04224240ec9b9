"""tspec: a symbolic, shape-checked specification of the Transformer.

    from spec import load, check
    report = check(load("base"))          # a built-in variant, a .toml or a .tspec path
    print(report.ok, [f.text() for f in report.findings])
"""

from spec.api import (
                      Report,
                      ShapeRow,
                      builtin_specs,
                      builtin_variants,
                      check,
                      load,
                      read_spec,
                      shapes,
)
from spec.errors import SpecError, SpecSyntaxError, TspecError, UsageError, VariantError
from spec.findings import Finding
from spec.language import parse, parse_file
from spec.variant import Variant

__all__ = ["Finding", "Report", "ShapeRow", "SpecError", "SpecSyntaxError", "TspecError",
           "UsageError", "Variant", "VariantError", "builtin_specs", "builtin_variants", "check",
           "load", "parse", "parse_file", "read_spec", "shapes"]
