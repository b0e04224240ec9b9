"""tspec: a symbolic, shape-checked specification of the Transformer.

    from tspec import load, check, grid, diff
    report = check(load("base"))          # a built-in variant, a .toml or a .tspec path
    print(report.ok, [f.text() for f in report.findings])
    table = grid("base", {"d_model": range(256, 1025, 64), "H": [4, 8, 12, 16]})
    print(table.summary(), [p.dims for p in table.points("invalid")])
    print(diff("gpt2_small", "gpt2_medium").text())

    from tspec import run, source, compile, load_weights
    result = run("gpt2_small", ["N=2"])   # its generated code on seeded random weights
    text = source("llama3_8b")            # the generated module, as `tspec generate` writes it
    model = compile("llama3_8b")          # that module with llama3_8b's dims and settings, loaded

The names below are imported on first use, so `import tspec` costs no sympy or NumPy (and the
command line's Ctrl-C during start-up stays one line).
"""

if __name__ != "tspec":          # the checkout's spec/ folder imported as a top-level package
    raise ImportError("spec/ is the source folder of the tspec package: import tspec")

from importlib import import_module as _import_module
from typing import TYPE_CHECKING

from tspec import moved as _moved

_moved.install()        # old import paths of modules that moved: see tspec.moved

__version__ = "0.2.0"            # pyproject.toml reads it (a literal, read without importing)

# each public name -> the module that defines it
_API = {
    **dict.fromkeys(["Diff", "Grid", "Report", "ShapeRow", "builtin_specs", "builtin_variants",
                     "check", "compile", "decode", "diff", "grid", "load", "load_weights",
                     "read_spec", "run", "shapes", "source"], "tspec.api"),
    **dict.fromkeys(["CodegenError", "ConfigError", "FindingsError", "GridError", "LimitError",
                     "RunError", "SpecError", "SpecSyntaxError", "TspecError", "UsageError",
                     "VariantError"], "tspec.errors"),
    "Finding": "tspec.checking.findings",
    "from_hf": "tspec.importing",
    "parse": "tspec.language.parser",
    "parse_file": "tspec.language.parser",
    "Variant": "tspec.language.variant",
    "WeightsError": "tspec.execution.weights",
}

__all__ = ["CodegenError", "ConfigError", "Diff", "Finding", "FindingsError", "Grid",
           "GridError", "LimitError",
           "Report", "RunError", "ShapeRow", "SpecError", "SpecSyntaxError", "TspecError",
           "UsageError",
           "Variant", "VariantError", "WeightsError", "builtin_specs", "builtin_variants", "check",
           "compile", "decode", "diff", "from_hf", "grid", "load", "load_weights", "parse",
           "parse_file", "read_spec", "run", "shapes", "source"]

if TYPE_CHECKING:
    from tspec.api import (
        Diff,
        Grid,
        Report,
        ShapeRow,
        builtin_specs,
        builtin_variants,
        check,
        compile,
        decode,
        diff,
        grid,
        load,
        load_weights,
        read_spec,
        run,
        shapes,
        source,
    )
    from tspec.checking.findings import Finding
    from tspec.errors import (
        CodegenError,
        ConfigError,
        FindingsError,
        GridError,
        LimitError,
        RunError,
        SpecError,
        SpecSyntaxError,
        TspecError,
        UsageError,
        VariantError,
    )
    from tspec.execution.weights import WeightsError
    from tspec.importing import from_hf
    from tspec.language.parser import parse, parse_file
    from tspec.language.variant import Variant


def __getattr__(name: str):
    """A public name, imported from its module on first use (PEP 562)."""
    if name not in _API:
        raise AttributeError(f"module 'tspec' has no attribute {name!r}")
    value = getattr(_import_module(_API[name]), name)
    globals()[name] = value         # the next use is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
