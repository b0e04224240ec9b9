"""The docs index's comparisons: how each variant differs from the next larger one of its kind
(``spec.diff``), and a grid of sizes around one variant (``spec.grid``), with the commands
that print them. Prepared as strings; the index templates only place them.
"""

import itertools
import shlex
from dataclasses import dataclass
from pathlib import Path

from tspec import api
from tspec.analysis.diff import compare, profile, relative
from tspec.checking.findings import display_path
from tspec.files import where as spec_line
from tspec.language.model import choices_in_force
from tspec.language.variant import Variant
from tspec.numbers import integer_text

ARROW = "→"


@dataclass
class Comparison:
    command: str               # "tspec diff gpt2_small gpt2_medium"
    dims: str                  # "d_model 768 → 1,024; H 12 → 16"
    parameters: str            # "124,439,808 → 354,823,168 (+185.1%)"
    flops: str
    memory: str


@dataclass
class GridExample:
    command: str
    headers: list[str]
    rows: list[list[str]]
    summary: str


def target(variant: Variant) -> str | None:
    """The variant as a command names it, quoted for the shell: a built-in one by name, one
    read from a file by the path given (relative to the working directory where it lies
    inside it); None for one with neither (a config given in Python)."""
    builtin = api.builtin_variants()
    if variant.name in builtin and variant.file is not None and \
            Path(variant.file) == builtin[variant.name]:
        return variant.name
    if variant.file is None:
        return None
    return shlex.quote(display_path(variant.file))


def shipped(variants: list[Variant]) -> bool:
    """Whether the variants are the shipped ones, every one of them, as `tspec docs` with no
    target documents them (nothing set on them with --set)."""
    builtin = api.builtin_variants()
    return sorted(v.name for v in variants) == sorted(builtin) and all(
        target(v) == v.name and not settings_given(v) for v in variants)


def settings_given(variant: Variant) -> list[str]:
    """The --set settings a variant was made with, each ``NAME=VALUE`` as given: its dims and
    choices, then its settings."""
    places = [*variant.places.values(), *variant.setting_places.values()]
    return [text.removeprefix("--set ") for line, text in places
            if line is None and text.startswith("--set ")]


def _settings_text(variant: Variant, varied: tuple[str, ...] = ()) -> str:
    """`` --set NAME=VALUE ...``: what a command needs to give the variant as it is (but the
    dims a grid varies, ``varied``, which a --set would fix)."""
    return "".join(f" --set {shlex.quote(text)}" for text in settings_given(variant)
                   if text.split("=", 1)[0].strip() not in varied)


def comparisons(variants: list[Variant]) -> list[Comparison]:
    """Within each group of variants with the same spec and the same choices in force, each
    variant against the next larger (by parameters, then name)."""
    groups: dict[tuple, list] = {}
    for variant in variants:
        spec = variant.spec
        key = (spec.name, tuple(choices_in_force(spec, spec.choice_values(variant.choices))
                                .items()))
        groups.setdefault(key, []).append(variant)
    out = []
    for group in groups.values():
        if len(group) < 2:          # nothing to compare it with: not profiled (its shapes
            continue                # and counts took as long as its page)
        members = [profile(variant, api.shapes(variant)) for variant in group]
        members.sort(key=lambda p: (_total(p) is None, _total(p) or 0, p.variant.name))
        for a, b in itertools.pairwise(members):
            diff = compare(a, b)
            figures = {c.name: _change(c.a, c.b) for c in diff.totals}
            first, second = target(a.variant), target(b.variant)
            same = settings_given(a.variant) == settings_given(b.variant)   # diff sets both
            out.append(Comparison(
                f"tspec diff {first} {second}{_settings_text(a.variant)}"
                if first and second and same else
                f"{a.variant.name} {ARROW} {b.variant.name}",
                "; ".join(f"{c.name} {_number(c.a)} {ARROW} {_number(c.b)}" for c in diff.dims)
                or "none", figures["parameters"], figures["flops"],
                figures["activation_bytes"]))
    return out


def grid_example(variants: list[Variant]) -> GridExample | None:
    """A grid of H (4 either side) by d_model (128 either side) around the first variant
    with every count bound; None when there is none."""
    for variant in variants:
        width, heads = variant.dims.get("d_model"), variant.dims.get("H")
        if width is None or heads is None or width <= 128 or heads <= 4 or \
                target(variant) is None:
            continue
        axes = {"H": [heads - 4, heads, heads + 4], "d_model": f"{width - 128}:{width + 128}:128"}
        grid = api.grid(variant, axes)
        if not grid.proved or grid.free:
            continue
        rows = [[str(p.dims["H"]), str(p.dims["d_model"]), "yes" if p.valid else "no",
                 _number(p.parameters), _number(p.flops), _number(p.activation_bytes),
                 "; ".join(f"`{b.statement}` ({spec_line(b)})" for b in p.breaks)]
                for p in grid.points()]
        return GridExample(
            f"tspec check {target(variant)} --grid H={','.join(map(str, axes['H']))} "
            f"--grid d_model={axes['d_model']}{_settings_text(variant, tuple(axes))}",
            ["H", "d_model", "valid", "parameters", "FLOPs", "activation bytes", "breaks"],
            rows, grid.summary())
    return None


def _total(p) -> int | None:
    return next(iter(p.bodies.values())).parameters


def _number(value) -> str:
    return "—" if value is None else integer_text(value, grouped=True)


def _change(a, b) -> str:
    """``124,439,808 → 354,823,168 (+185.1%)``; one number when they are the same."""
    if a == b:
        return _number(a)
    change = f" ({relative(a, b)})" if a and b is not None else ""
    return f"{_number(a)} {ARROW} {_number(b)}{change}"
