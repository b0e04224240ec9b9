"""The Python API: find specs and variants, check them, list their shapes; generate their
code, run it, and load their weights (these through tspec.codegen, imported when called).

    from tspec import load, check
    report = check(load("base"))
    for finding in report.findings:
        print(finding.text())
"""

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from tspec.analysis.diff import Diff, compare, profile
from tspec.analysis.grid import Axis, Grid, axes_from
from tspec.analysis.grid import evaluate as evaluate_grid
from tspec.checking import limits
from tspec.checking.check import Result, TensorRow
from tspec.checking.check import check as check_spec
from tspec.checking.findings import summary
from tspec.checking.prove import Prover
from tspec.checking.report import Report, check_variant, require_proved
from tspec.errors import FindingsError, TspecError, UsageError
from tspec.inputs import user_path
from tspec.language.model import Spec
from tspec.language.names import did_you_mean, module_name_like
from tspec.language.variant import Variant, load_variant, parse_setting, variant_from_text
from tspec.shipped import (  # noqa: F401 (the API has always named them)
    BUILTIN_SPEC,
    SPEC_DIR,
    _exists,
    builtin_specs,
    builtin_variants,
    checkout,
    in_checkout,
    is_builtin,
    read_spec,
    resolve_spec,
)
from tspec.symbolic.shape import Shape

if TYPE_CHECKING:
    from tspec.execution.run import DecodeResult, RunResult


def load(target: str | Path, settings: list[str] | None = None) -> Variant:
    """A built-in name or a path: a spec (.tspec), a variant (.toml) or a Hugging Face config
    (a .json file, or a folder holding config.json, imported as ``tspec import`` does), with
    --set applied; a ``PretrainedConfig`` or a config dict is imported too."""
    if isinstance(target, dict) or hasattr(target, "to_dict") and callable(target.to_dict):
        variant = imported(target)
        return variant.with_settings(settings) if settings else variant
    if not isinstance(target, (str, os.PathLike)):
        raise UsageError(f"a spec or variant is a name, a path, a config dict or a "
                         f"transformers PretrainedConfig, got {type(target).__name__}")
    target = str(user_path(target, "a spec or variant path")) \
        if isinstance(target, os.PathLike) or "\0" in target else target
    if not target.strip():
        raise UsageError("an empty name is no spec or variant")
    variants = builtin_variants()
    specs = builtin_specs()
    path = Path(target)
    # a built-in's name is the built-in, whatever the working directory holds (a folder
    # ./llama3_8b with a config.json silently took its place); ./llama3_8b is the folder
    if target in variants:
        variant = load_variant(variants[target], resolve_spec)
    elif target in specs:
        variant = Variant(target, read_spec(specs[target]), file=str(specs[target]),
                          is_spec=True)
    elif _is_config(path):
        variant = imported(path)
    elif _is_folder(path):
        raise UsageError(f"{target} is a folder without config.json: give a spec (.tspec), a "
                         "variant (.toml) or a Hugging Face config (config.json, or a folder "
                         "holding one)")
    elif _exists(path):
        if path.suffix == ".toml":
            variant = load_variant(path, resolve_spec)
        else:
            spec = read_spec(path)
            variant = Variant(spec.name, spec, file=str(path), is_spec=True)
    else:
        names = list(specs) + list(variants)
        raise UsageError(f"no spec or variant named {target!r}: not a file, and not a "
                         f"built-in ({', '.join(names)}){did_you_mean(target, names)}")
    return variant.with_settings(settings) if settings else variant


def _is_folder(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:
        return False


def _is_config(path: Path) -> bool:
    """A Hugging Face config: a .json file, or a folder holding config.json (a path the
    system cannot look at is none: reading it says why)."""
    try:
        return path.suffix == ".json" and _exists(path) or path.is_dir() and \
            (path / "config.json").is_file()
    except OSError:
        return False


def imported(config) -> Variant:
    """The variant of a Hugging Face config (``tspec.from_hf``'s TOML, read in memory): a
    ``config.json``, a folder holding one, a dict or a ``PretrainedConfig``; named after the
    folder of its file, else its ``_name_or_path``, else its ``model_type``, as a module name
    (``Meta-Llama-3.1-8B/``: ``Meta_Llama_3_1_8B``), which generated code takes.

    Each dim, choice and setting is placed (for findings) at the line of config.json that
    gives it, or at none (a default, a dict): never at a line of the TOML made in memory."""
    from tspec.importing.convert import imported as import_config
    from tspec.importing.source import field_lines
    from tspec.importing.writing import variant_text
    result, source = import_config(config)
    text = variant_text(result, source)
    if isinstance(config, (str, Path)):
        path = Path(config)
        folder = path if path.is_dir() else path.parent
        name = folder.resolve().name or "config"
        file = str(path / "config.json" if path.is_dir() else path)
    else:
        data = config if isinstance(config, dict) else config.to_dict()
        name = Path(str(data.get("_name_or_path") or "")).name or str(data["model_type"])
        file = f"<{name} config>"
    try:
        variant = variant_from_text(text, Path(file), resolve_spec,
                                    called=module_name_like(name))
    except TspecError as error:
        if error.file == file:          # a line of the TOML, not of the config: none
            error.line = error.column = None
        raise
    lines = field_lines(config)

    def placed(places: dict) -> dict:
        return {key: (lines.get(result.origins.get(key)), said)
                for key, (_, said) in places.items()}
    variant.places, variant.setting_places = placed(variant.places), \
        placed(variant.setting_places)
    return variant


def _variant(target, settings: list[str] | None) -> Variant:
    """A target as a variant (a bare spec: every choice at its default unless set; a Hugging
    Face config, imported), with ``NAME=VALUE`` settings applied."""
    if isinstance(target, Spec):
        target = Variant(target.name, target, file=target.file, is_spec=True)
    elif not isinstance(target, Variant):        # load imports a config object too
        target = load(target)
    return target.with_settings(settings) if settings else target


def check(target: Variant | Spec | str, settings: list[str] | None = None, *,
          time_limit: float | None = limits.TIME_LIMIT) -> Report:
    """Check a spec (every choice combination) or a variant (its choices, then its values),
    within ``time_limit`` seconds (None: no limit; past it, a LimitError)."""
    return check_variant(_variant(target, settings), time_limit)


@dataclass
class ShapeRow:
    name: str
    role: str
    symbolic: str
    concrete: str
    dtype: str
    meaning: str
    declared: bool


def shapes(target: Variant | str, settings: list[str] | None = None, *,
           proved: bool = True) -> list[ShapeRow]:
    """Every tensor of a variant with its symbolic and concrete shape; a variant with findings
    is a FindingsError, as for `tspec run` (``proved`` False: the shapes as declared, whatever
    the checker finds, as `tspec shapes` lists them before it says what it found)."""
    variant = _variant(target, settings)
    if proved:
        require_proved(variant, "no shapes listed")
    spec = variant.spec
    result = check_spec(spec, variant.choices)
    limits.doing(f"listing the shapes of {variant.name}")
    substitution = concrete_substitution(spec, result, variant.dims)
    rows = []
    for row in result.tensors:
        limits.tick()
        rows.append(ShapeRow(row.name, row.role, _text(row.shape),
                             _text(row.shape.subs(substitution) if row.shape else None),
                             row.dtype, row.meaning, row.declared))
    return rows


def grid(target: Variant | Spec | str, axes: Mapping | Sequence[Axis],
         settings: list[str] | None = None) -> Grid:
    """Every combination of some dims' values, judged against one proof of the target under
    its choices, with parameters, FLOPs and activation memory for the valid ones.

        grid("base", {"d_model": range(256, 1025, 64), "H": [4, 8, 12, 16]})

    ``axes``: dim name -> a range, a sequence of positive integers, or text in --grid syntax
    ("256:1024:64", STOP included; "4,8,12"); ``settings`` fix dims and choices (--set), and
    a dim may not be both set and varied. Bad axes raise GridError."""
    variant = _variant(target, settings)
    fixed = {parse_setting(setting)[0] for setting in settings or ()}
    axes = axes_from(axes) if isinstance(axes, Mapping) else list(axes)
    found = evaluate_grid(variant, axes, fixed)
    # a proof with findings judges no combination: said, as every command says it
    require_proved(variant, "no combination judged", found.proof)
    return found


def diff(a: Variant | Spec | str, b: Variant | Spec | str,
         settings: list[str] | None = None) -> Diff:
    """What changes from variant ``a`` to variant ``b``: choices, dims, shapes, and the
    parameters, FLOPs and activation memory of the model and of each block. ``settings``
    apply to both sides."""
    first, second = _variant(a, settings), _variant(b, settings)
    # both sides checked as `tspec check` checks them, before either is counted
    found = [(variant, check_variant(variant).findings) for variant in (first, second)]
    if any(findings for _, findings in found):
        said = " and ".join(f"{summary(findings)} in {variant.name}"
                            for variant, findings in found if findings)
        raise FindingsError(f"{said}: nothing compared",
                            [f for _, findings in found for f in findings], exit_status=2)
    return compare(profile(first, shapes(first, proved=False)),
                   profile(second, shapes(second, proved=False)))


def source(target: Variant | Spec | str, settings: list[str] | None = None, *,
           backend: str = "numpy") -> str:
    """The generated module of a spec or variant for ``backend`` ("numpy" or "cupy"): what
    `tspec generate` writes for its choices, every other choice at its default (only choices
    matter: dims are arguments of the generated functions). Checked first as `tspec check`
    and ``compile`` check it: a finding is a FindingsError."""
    from tspec.codegen.generate import source as generated_source
    variant = _variant(target, settings)
    require_proved(variant, "no code generated")
    return generated_source(variant.spec, variant.choices, backend)


def compile(target: Variant | Spec | str, settings: list[str] | None = None, *,
            backend: str = "numpy", typecheck: bool = False) -> ModuleType:
    """A variant's generated module, imported and ready to call: what `tspec generate VARIANT`
    writes (a spec: under its default choices), its dims and settings the defaults of the
    keyword arguments that take them, so that ``module.transformer(tokens, mask, params)``
    computes that variant. The variant is checked first (a finding: a CodegenError).

    Nothing is written in your tree: the text goes, once per content, to this user's cache
    folder of generated code (tempdir/tspec-generated-UID, private to them), beside the
    runtime it was generated with, and is imported from there as `tspec run` imports its
    code; so it always runs on its own runtime, even in a checkout whose committed one is
    stale. `tspec generate VARIANT --out DIR` writes the files to keep. ``typecheck``: check
    every array's shape at run time (jaxtyping)."""
    from tspec.execution.loading import load_variant
    return load_variant(_variant(target, settings), backend, typecheck=typecheck)


def run(target: Variant | Spec | str, settings: list[str] | None = None,
        **options) -> "RunResult":
    """Generate a variant's code and run its forward pass on seeded random weights and inputs,
    as `tspec run` does: dims it leaves free at tspec run's sizes (B = 2, T = 32, V = 1000,
    ...), the variant checked at them first (findings: a CodegenError, nothing runs).
    ``options``: backend, seed, dtype, typecheck, decode_steps, max_memory, as
    tspec.execution.run.run takes them."""
    from tspec.execution.run import run as run_variant
    return run_variant(_runnable(target, settings), **options)


def decode(target: Variant | Spec | str, steps: int, settings: list[str] | None = None,
           **options) -> "DecodeResult":
    """Decode a variant's seeded random sequence: prefill, then ``steps`` positions one at a
    time, against the full forward's logits (`tspec run --decode STEPS`). Sizes, check and
    ``options`` as for ``run`` (without decode_steps)."""
    from tspec.execution.run import decode as decode_variant
    return decode_variant(_runnable(target, settings), steps, **options)


def _runnable(target: Variant | Spec | str, settings: list[str] | None) -> Variant:
    from tspec.execution.run import with_run_defaults
    variant = with_run_defaults(_variant(target, settings))
    require_proved(variant, "nothing to run")
    return variant


def load_weights(target: Variant | Spec | str, path: str | Path,
                 settings: list[str] | None = None, *, dtype=None) -> dict:
    """A variant's parameters, checked against the shapes the spec gives at the variant's
    sizes and nested as the generated functions take them (``params["encoder"]["layers"][0]
    ["self_attention"]["W_Q"]``), from a checkpoint: a .safetensors file or a folder holding
    ``model.safetensors`` or a sharded ``model.safetensors.index.json``, memory-mapped, under
    the spec's flat dotted names (``encoder.layers.0.self_attention.W_Q``; also .npz) or a
    Hugging Face family's names (GPT-2, BERT, Llama and its kin, by the variant's choices).
    Every tensor is used or named as unused (the result's ``unused``: name -> why), every
    parameter found, and every shape checked, before a tensor is read; bfloat16 and float16
    convert to ``dtype`` (None: the checkpoint's own where the generated code computes in it,
    else float32) once their memory is counted. A parameter missing, unexpected or of another
    shape is a WeightsError naming it; a file that cannot be read, or a pickle (.bin, .pt), a
    UsageError."""
    from tspec.execution import checkpoint_files
    variant = _variant(target, settings)
    return checkpoint_files.load_variant(path, variant.spec, variant.choices, variant.dims,
                                         variant.name, dtype, variant.settings)


def concrete_substitution(spec: Spec, result: Result, dims: dict[str, int]) -> dict:
    """Dim symbol -> value (or expression of free dims), derived dims included."""
    symbols = spec.symbols()
    values = {symbols[n]: v for n, v in {**result.values, **dims}.items()}
    prover = Prover(list(symbols.values()), [], result.lets, values)
    return {s: prover.norm(s) for s in symbols.values()}


def _text(shape: Shape | None) -> str:
    return "?" if shape is None else shape.text()


__all__ = ["Diff", "Grid", "Report", "ShapeRow", "TensorRow", "builtin_specs",
           "builtin_variants", "check", "compile", "decode", "diff", "grid", "load", "load_weights",
           "read_spec", "resolve_spec", "run", "shapes", "source"]
