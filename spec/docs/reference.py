"""The op reference of the manual, docs/manual/ops.md, generated from the op catalogue.

Every op of ``tspec.ops.catalogue.OPS`` gets its entry: how a spec writes it, what it is (the
entry's summary), its shape rule as its class states it (the class's docstring), its LaTeX, its
FLOPs and the function its generated code calls; then the run-time settings ops read, the
scalar functions and the activations. The data is prepared here as strings; the template
(``templates/ops.md.j2``) only places them, each value escaped for Markdown. `tspec docs`
writes the page with the shipped documentation, and `tspec docs --check` compares it.
"""

import functools
import inspect
import re
from dataclasses import dataclass
from pathlib import Path

import jinja2

from tspec.codegen.rendering.render import environment
from tspec.docs import markup
from tspec.files import headed
from tspec.ops.base import CATALOGUE, Op
from tspec.ops.catalogue import ACTIVATIONS, OPS, SCALAR_FUNCTIONS, SETTINGS

TEMPLATES = Path(__file__).resolve().parent / "templates"
PAGE = "ops.md"             # its name in the manual's folder, docs/manual/

# the ops a spec writes in syntax of the language's own rather than by a name or an operator
# (the parser, spec/language/terms.py, makes them: ``-X``, ``X.T``, ``E[t]``, ``P[:n]``,
# ``X / c``)
SYNTAX = {
    "neg": ["-X"],
    "transpose": ["X.T", "transpose(X)"],
    "scale": ["X * c", "c * X", "X / c"],
    "gather": ["E[t]"],
    "slice_rows": ["P[:n]", "P[a:b]"],
    "einsum": ['einsum("ij,jk->ik", X, Y)'],
    "pow": ["X ** c"],
}
# placeholders for an op's arguments, by kind: tensors, tensors or scalars, dim expressions
PLACEHOLDERS = {"tensor": ("X", "Y", "Z"), "value": ("X", "Y", "Z"), "dim": ("n", "m", "k")}
# the attributes an example of the op's LaTeX is drawn with, where its own have no default
EXAMPLE_ATTRS = {"einsum": {"spec": "ij,jk->ik"}, "scale": {"divide": True}}
EXAMPLE_ARGS = {"scale": ["X", "c"], "pow": ["X", "c"], "gather": ["E", "t"], "slice_rows": ["P", "n"],
                "einsum": ["X", "Y"]}


@dataclass
class OpEntry:
    name: str
    summary: str
    written: list[str]         # how a spec writes it, code
    arguments: str             # its arguments in words
    rule: list[str]            # its class's docstring, paragraph by paragraph (docs text)
    latex: str                 # its LaTeX drawn at example arguments
    flops: str                 # docs text
    code: str                  # docs text: the function its generated code calls
    settings: list[str]


@dataclass
class SettingEntry:
    name: str
    default: str
    meaning: str
    read_by: list[str]


def _written(op: Op) -> list[str]:
    if op.name in SYNTAX:
        return SYNTAX[op.name]
    names = _arguments(op)
    if op.spelling is not None and not op.spelling.isidentifier():
        return [f"{names[0]} {op.spelling} {names[1]}"]
    needed = len(op.params) - op.optional
    given = ", ".join(names[:needed] + [f"{key}={value}" for key, value in op.attrs.items()])
    forms = [f"{op.spelling}({given})"]
    if op.optional:
        forms.append(f"{op.spelling}({', '.join(names)})")
    return forms


def _arguments(op: Op) -> list[str]:
    """Placeholder names for the op's arguments, in order: the n-th tensor, dim, ..."""
    counts: dict[str, int] = {}
    names = []
    for kind in op.params:
        place = "tensor" if kind == "value" else kind
        names.append(PLACEHOLDERS[kind][counts.get(place, 0)])
        counts[place] = counts.get(place, 0) + 1
    return names


_KINDS = {"tensor": "a tensor", "value": "a tensor or a dim expression",
          "dim": "a dim expression"}


def _arguments_text(op: Op) -> str:
    if not op.params:
        return "a pattern, then one tensor for each of its operands"
    kinds = [_KINDS[kind] for kind in op.params]
    if op.optional:
        kinds[-op.optional:] = [f"{kind} (optional)" for kind in kinds[-op.optional:]]
    text = f"{op.arity()}: {', '.join(kinds)}"
    if op.attrs:
        text += "; " + ", ".join(f"`{key}=` (default {value})" for key, value in op.attrs.items())
    return text


def _rule(op: Op) -> list[str]:
    """The paragraphs of the docstring of the op's class: its shape rule in its own words
    (none where the class has none, and dataclass made one of its fields)."""
    cls = type(op)
    text = cls.__dict__.get("__doc__") or ""
    if text.startswith(f"{cls.__name__}("):         # dataclass's own: the class has none
        return []
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return [" ".join(p.split()).replace("``", "`") for p in paragraphs if p.strip()]


def _latex(op: Op) -> str:
    args = EXAMPLE_ARGS.get(op.name) or _arguments(op)
    attrs = {**op.attrs, **EXAMPLE_ATTRS.get(op.name, {})}
    return op.latex(args, attrs)


def _flops(op: Op) -> str:
    product = ("; a matrix product, as the scaling-law comparisons count them"
               if op.kind == "matmul" else "")
    if type(op).flops is not Op.flops:
        owner = next(c for c in type(op).__mro__ if "flops" in c.__dict__)
        return f"counted by its own rule, `{owner.__name__}.flops`{product}"
    if op.per_element == 0:
        return "none: it moves data, with no arithmetic"
    return f"{op.per_element} per output element"


def _code(op: Op) -> str:
    if op.helper is not None:
        ways = []
        if op.row_wise:
            ways.append("row by row, on the thread pool in chunks of rows")
        if op.activation:
            ways.append("applied in place to a product's fresh result")
        if op.normalises:
            ways.append("with a residual sum fused in where the backend fuses them")
        return f"the runtime's helper `rt.{op.helper}`" + (f" ({'; '.join(ways)})"
                                                           if ways else "")
    if op.array_function is not None:
        return f"the array module's `{op.array_function}` (`np.{op.array_function}`)"
    owner = next(c for c in type(op).__mro__ if "code" in c.__dict__)
    return f"built by its own code rule, `{owner.__name__}.code`"


def _sentence(summary: str) -> str:
    """A summary as a sentence's start: capitalised where it begins with a word (``matrix
    product``), as it is where it begins with a formula (``max(0, x)``, ``x * sigmoid(x)``)."""
    first = summary.split(" ", 1)[0]
    return summary[:1].upper() + summary[1:] if first.isalpha() and len(first) > 1 else summary


def entries() -> list[OpEntry]:
    """One entry for each op of the catalogue, in its order."""
    return [OpEntry(op.name, _sentence(op.summary), _written(op), _arguments_text(op), _rule(op),
                    _latex(op), _flops(op), _code(op), list(op.settings))
            for op in OPS.values()]


def settings() -> list[SettingEntry]:
    return [SettingEntry(name, setting.default, setting.meaning,
                         [op.name for op in OPS.values() if name in op.settings])
            for name, setting in SETTINGS.items()]


@functools.cache
def _environment() -> jinja2.Environment:
    """The docs pages' Markdown environment (``site``) over this folder's templates: every value
    escaped with ``markup.markdown`` unless a filter made it Markdown already."""
    md = environment().overlay(loader=jinja2.FileSystemLoader(TEMPLATES),
                               finalize=markup.finalize)
    md.filters = {**md.filters, "cell": functools.partial(prose, table=True),
                  "code": markup.code, "latex": markup.latex, "prose": prose}
    return md


_STARS = re.compile(r"(`[^`]*`|\$[^$]*\$)|\*")


def prose(text: str, table: bool = False) -> markup.Markdown:
    """Docs text (``markup.markdown``; ``table``: in a table's cell), with every ``*`` outside
    code and math escaped too, so that ``H*d ... p * theta`` is never emphasis."""
    escaped = markup.markdown(text, table)
    return markup.Markdown(_STARS.sub(lambda m: m.group(1) or r"\*", escaped))


def files() -> dict[str, str]:
    """The op reference's file name -> text, headed by tspec's header."""
    text = _environment().get_template("ops.md.j2").render(
        ops=entries(), settings=settings(), catalogue=CATALOGUE,
        scalar_functions=sorted(SCALAR_FUNCTIONS), activations=sorted(ACTIVATIONS))
    return {PAGE: headed(PAGE, text)}
