"""`tspec docs`: a variant's documentation, generated from its proved spec.

For each variant: the dims (meaning, value, definition, constraints), every equation of every
body in pipeline order (LaTeX, symbolic and concrete shapes, parameters and FLOPs as formulas
in the dims and as numbers), parameter totals, FLOPs per sequence and per token with the
attention part apart, activation memory per layer, dataflow diagrams, and for variants of
published models, our parameter count beside the published one. The counts come from
``spec.counts`` (the op catalogue's FLOP rules, the spec's parameter declarations). Data is
prepared here as strings; the templates (Markdown, HTML) only place them.
"""

import functools
import hashlib
import re
import unicodedata
import urllib.parse
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import sympy
from markupsafe import Markup

from tspec import api
from tspec.analysis.counts import (
    BYTES,
    DTYPE,
    BodyCost,
    call_paths,
    costs,
    free_sizes,
    size_text,
    used_dims,
)
from tspec.checking import limits
from tspec.checking.check import check
from tspec.checking.findings import display_path
from tspec.checking.prove import concrete_values
from tspec.checking.prove import evaluate as prove_evaluate
from tspec.checking.report import require_none, require_proved, sizes_text
from tspec.codegen.lowering.body import model_summary
from tspec.codegen.lowering.lower import step_choices
from tspec.codegen.rendering.render import environment
from tspec.docs import diagram, markup, reference
from tspec.docs.comparisons import (
    comparisons,
    grid_example,
    settings_given,
    shipped,
    target,
)
from tspec.docs.scaling import scaling
from tspec.errors import UsageError
from tspec.files import headed, inside, open_regular, shown, stale_diff, tspecs, write_outputs
from tspec.files import where as spec_line
from tspec.language.latex import name_latex
from tspec.language.model import (
    BlockCall,
    Constraint,
    Let,
    TensorDecl,
    Update,
    choices_in_force,
    select,
    step_function,
)
from tspec.language.variant import Variant
from tspec.numbers import integer_text

FORMATS = ("md", "html")
STEP_FUNCTION = step_function(None)         # the decoding step's function: decode_step
SORTED_DIMS = 64       # a formula over more dims than this is printed in sympy's order


@dataclass
class Row:
    cells: list


@dataclass
class EquationView:
    title: str                 # "S_h: scores, plus the additive mask log M"
    latex: str
    mathml: Markup
    inputs: list[str]          # "Q_h: [H] B T_q d_k = (12, 1, 1024, 64)"
    output: str
    parameters: str            # "W_Q (d_model H*d_k), b_Q (H*d_k)" or "none"
    flops_latex: str
    flops_number: str
    params_number: str


@dataclass
class BodyView:
    name: str
    anchor: str
    summary: str
    where: str
    calls: list[str]           # where it is called, and the dims it is called with
    binding: str               # the call whose sizes the concrete figures use
    equations: list[EquationView]
    mermaid: list[markup.Markdown]
    svg: Markup


@dataclass
class Page:
    name: str
    title: str
    description: str
    spec_file: str
    spec_hash: str
    choices: list[str]
    sizes: str
    dims: list[Row]
    parameters: list[Row]
    parameter_list: list[Row]
    flops: list[Row]
    memory: list[Row]
    published: list[str]
    scaling: "ScalingView | None"
    decoding: "Decoding | None"
    bodies: list[BodyView]

    @property
    def heading(self) -> str:
        """``gpt2_small: GPT-2 small ...``, or the name alone for a variant without a
        description (not ``u: ``)."""
        return f"{self.name}: {self.description}" if self.description else self.name
    edit: str = "the spec or the variant"      # what to change instead of the page


@dataclass
class ScalingView:
    """The comparison with the scaling-law formulas: one table a formula (theirs, each term
    by which ours differs, ours), or no table and the sentence saying why there is none."""
    intro: str
    tables: list[list[Row]]


@dataclass
class Decoding:
    """Incremental decoding under the spec's ``decoding=step``: the cache and one step."""
    intro: str                 # what prefill and the step do with the cache
    positions: int             # T_past the figures take: the last step of a T_dec sequence
    sizes: dict                # the step's own dims at these figures: T_past, T_new (1)
    states: list[Row]          # state, shape, copies, elements, bytes at these sizes
    total: list[str]           # the cache: formula, bytes at these sizes, bytes a position
    step_flops: list[str]      # one step of one position: formula (T_new = 1), number


def sizes_for(variant: Variant, used: set[str]) -> dict[str, int]:
    """The variant's dims, with the free ones the model uses (``used``) at the sizes the
    figures take (``spec.counts.free_sizes``: B = 1, a sequence as long as max_len or 512)."""
    known = concrete_values(variant.spec, variant.choices, variant.dims)
    return dict(variant.dims) | free_sizes({str(k): int(v) for k, v in known.items()}, used)


def page(variant: Variant) -> Page:
    """Everything a variant's documentation shows, as strings."""
    spec = variant.spec
    limits.doing(f"making the documentation of {variant.name}")
    choices = spec.choice_values(variant.choices)
    # as `tspec check` checks it (a spec it refuses, a tensor never computed: no costs), then
    # at the sizes the pages give the dims it leaves free
    report = require_proved(variant, "no documentation written")
    bodies = costs(spec, choices)
    used = used_dims(spec, choices, bodies)
    dims = sizes_for(variant, used)
    if variant.is_spec or report.concrete is None or dims != variant.dims:
        # sizes the check of the variant did not take (a dim it leaves free): checked there;
        # at the variant's own sizes that check has said it already
        result = check(spec, choices, dims)
        limits.doing(f"making the documentation of {variant.name}")
        require_none(result.findings, f"in {variant.name} at the sizes its pages take "
                     f"({sizes_text({k: v for k, v in dims.items() if k not in variant.dims})})",
                     "no documentation written")
    model = bodies[spec.name]
    values_by_symbol = concrete_values(spec, choices, dims)
    values = {str(k): int(v) for k, v in values_by_symbol.items()}

    def number(expr) -> "int | _Free":
        return _number(expr, values_by_symbol)

    paths = call_paths(bodies, spec.name)
    views = [_body_view(spec, choices, values_by_symbol, body, paths.get(name, []))
             for name, body in bodies.items()]
    decoding = _decoding(spec, choices, dims)
    return Page(
        name=page_name(variant), title=spec.title, description=variant.description,
        spec_file=shown(spec.file), spec_hash=spec.text_hash[:16],
        choices=[f"{k} = {v}" for k, v in choices_in_force(spec, choices).items()],
        sizes=", ".join(f"{k} = {v}" for k, v in dims.items()
                        if k not in variant.dims),
        dims=_dim_rows(spec, choices, values, variant, dims, used, decoding),
        parameters=_parameter_rows(bodies, number),
        parameter_list=_parameter_list(spec, choices, bodies, paths, number),
        flops=_flop_rows(spec, model, number, dims, choices),
        memory=_memory_rows(bodies, paths, number),
        # the published model's count, where --set changed no dim or choice of it
        published=[] if _sets_the_model(variant) else _published(variant,
                                                                   number(model.parameters)),
        scaling=_scaling(spec, choices, model, values_by_symbol),
        decoding=decoding,
        bodies=views,
        edit="the spec" if variant.is_spec else "the spec or the variant")


# -- dims

def _dim_rows(spec, choices, values, variant, dims, used, decoding) -> list[Row]:
    statements = select(spec.body, choices)
    lets = {s.dim: s for s in statements if isinstance(s, Let)}
    constraints = [s for s in statements if isinstance(s, Constraint)]
    stepping = decoding.sizes if decoding is not None else {}
    step_constraints = [s for s in select(spec.body, step_choices(spec, choices))
                        if isinstance(s, Constraint)] if stepping else []

    def involving(name, among) -> str:
        return "; ".join(f"`{c.text}`" for c in among
                         if name in {str(s) for s in c.relation.free_symbols}) or "—"

    rows = []
    for name, dim in spec.dims.items():
        if name not in used and name in stepping:
            # the full model has no such dim; the decoding step's figures take this size
            rows.append(Row([_symbol(name), dim.meaning, _count(stepping[name]),
                             "the decoding step's figures (below)",
                             involving(name, step_constraints)]))
            continue
        if name not in used:
            rows.append(Row([_symbol(name), dim.meaning, "—", "not used under these choices",
                             "—"]))
            continue
        if name in lets:
            origin = f"${name_latex(name)} = {_plain_latex(lets[name].expr)}$"
        elif name in variant.dims:
            origin = "the variant"
        elif dim.value is not None:
            origin = "the spec"
        elif name in dims:
            origin = "docs default"
        else:
            origin = "free"
        value = _count(values[name]) if name in values else "—"
        rows.append(Row([_symbol(name), dim.meaning, value, origin,
                         involving(name, constraints)]))
    return rows


# -- parameters, FLOPs, memory

def _parameter_rows(bodies, number) -> list[Row]:
    rows = []
    for name, body in bodies.items():
        if body.parameters == 0:
            continue
        rows.append(Row([f"`{name}`", _latex(body.parameters),
                         _count(number(body.parameters))]))
    return rows


def _parameter_list(spec, choices, bodies, paths, number) -> list[Row]:
    """Every parameter tensor: where it is declared, shape, size, copies in the model."""
    rows = []
    for name, body in bodies.items():
        copies = sum((times for _, _, times in paths.get(name, [])), sympy.Integer(0)) \
            if body.block is not None else sympy.Integer(1)
        meanings = _meanings(spec, choices, body)
        for param, shape, size in body.own_params:
            rows.append(Row([f"`{name}.{param}`", shape.text(), meanings.get(param, ""),
                             _count(number(size)), _count(number(copies)),
                             _count(number(size * copies))]))
    return rows




def _flop_rows(spec, model, number, dims, choices) -> list[Row]:
    tokens = _positions(spec, choices)
    per = FREE if tokens is None else number(tokens)
    rows = []
    for label, expr in (("matrix products", model.flops.matmul),
                        ("everything else", model.flops.other),
                        ("total", model.flops.total),
                        ("of which attention (softmax(QK^T/sqrt(d_k) + L) V)",
                         model.flops.attention)):
        total = number(expr)
        rows.append(Row([label, _latex(expr), _count(total), _per(total, per)]))
    return rows


def _positions(spec, choices):
    """The positions a forward pass produces outputs for: T_dec with a decoder, else T; None
    for a spec without a batch and a sequence (per token is then a dash)."""
    symbols = spec.symbols()
    length = "T" if choices.get("arch") == "encoder_only" or "T_dec" not in symbols else "T_dec"
    if "B" not in symbols or length not in symbols:
        return None
    return symbols["B"] * symbols[length]


def _memory_rows(bodies, paths, number) -> list[Row]:
    rows = []
    for name, body in bodies.items():
        for path, binding, _ in paths.get(name, []):
            if body.block is None or not path.endswith("layers"):
                continue
            one = body.activations.subs(binding).bytes(DTYPE)
            rows.append(Row([f"`{name}` (each of `{path}`)", _latex(one),
                             _bytes(number(one))]))
    model = next(iter(bodies.values()))
    total = model.activations.bytes(DTYPE)
    rows.append(Row(["the whole model", _latex(total), _bytes(number(total))]))
    return rows


def _decoding(spec, choices, dims) -> Decoding | None:
    """The decoding step's cache (every state, at T_past = the sequence's positions) and
    FLOPs of one step of one position; None for a model that does not decode."""
    step = step_choices(spec, choices)
    if step is None:
        return None
    bodies = costs(spec, step)
    paths = call_paths(bodies, spec.name)
    symbols = spec.symbols()
    # the last step of a sequence as long as the full model's: T_past + T_new = T_dec (a
    # step past it could outrun a position table of T_dec = max_len rows)
    length = dims.get("T_dec")
    if length is None or length < 2:
        return None
    positions = length - 1
    values = concrete_values(spec, step, dims | {"T_past": positions, "T_new": 1})
    rows, total = [], sympy.Integer(0)
    extended: dict[str, None] = {}
    read: dict[str, None] = {}
    for name, body in bodies.items():
        if body.block is None:
            continue
        statements = select(body.block.body, step)
        states = [s for s in statements if isinstance(s, TensorDecl) and s.role == "state"]
        updated = {s.state for s in statements if isinstance(s, Update)}
        for state in states:
            (extended if state.name in updated else read).setdefault(f"`{state.name}`")
            for path, binding, copies in paths.get(name, []):
                shape = state.shape.subs(binding)
                size = copies * sympy.Mul(*shape.dims) * (shape.family or 1)
                total += size
                rows.append(Row([f"`{path}.{state.name}`", f"`{shape.text()}`",
                                 _latex(copies), _latex(size),
                                 _bytes(_number(size * BYTES[DTYPE], values))]))
    if not rows:
        return None
    # what one more position adds (a cross-attention's source keys do not grow)
    per_position = sympy.diff(total, symbols["T_past"]) / symbols["B"]
    flops = bodies[spec.name].flops.total.subs(symbols["T_new"], 1)
    did = [f"extending {_and(list(extended))}" if extended else "",
           f"reading {_and(list(read))} as prefill left {'it' if len(read) == 1 else 'them'}"
           if read else ""]
    intro = (f"`prefill` runs the full model over the first positions and keeps the cache "
             f"below; `{STEP_FUNCTION}` (the spec under `decoding = step`) then adds "
             "$T_{\\mathrm{new}}$ positions after the $T_{\\mathrm{past}}$ it holds, "
             f"{' and '.join(d for d in did if d)}. The figures are those of the last step "
             f"of a sequence of $T_{{\\mathrm{{dec}}}}$ = {length:,} positions, "
             f"$T_{{\\mathrm{{past}}}}$ = {positions:,} and $T_{{\\mathrm{{new}}}}$ = 1; the "
             f"cache, in {DTYPE}:")
    return Decoding(
        intro, positions, {"T_past": positions, "T_new": 1}, rows,
        [_latex(total * BYTES[DTYPE]), _bytes(_number(total * BYTES[DTYPE], values)),
         _bytes(_number(per_position * BYTES[DTYPE], values))],
        [_latex(flops), _count(_number(flops, values))])


def _and(items: list[str]) -> str:
    """a; a and b; a, b and c."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _sets_the_model(variant: Variant) -> bool:
    """Whether --set gave the variant a dim or a choice (a setting alone, eps, leaves the
    published model's parameters as they are)."""
    return any(line is None and text.startswith("--set ")
               for line, text in variant.places.values())


def _published(variant: Variant, ours: int) -> list[str]:
    if variant.published is None or ours is FREE:
        return []
    published = variant.published
    difference = ours - published.parameters
    lines = [f"Published: {published.parameters:,} parameters ({published.source}).",
             f"Counted here: {ours:,} ({difference:+,}, {difference / published.parameters:+.2%})."]
    if published.note:
        lines.append(published.note)
    return lines


def _scaling(spec, choices, model, values) -> "ScalingView | None":
    """Our matrix products against Kaplan et al. (2020) and Hoffmann et al. (2022), each as
    published, every term by which they differ named with its formula and number
    (``docs.scaling``); or the sentence saying why there is no comparison; None where the
    spec has not the built-in dims the formulas read."""
    found = scaling(spec, choices, model)
    if not found.comparisons:
        return ScalingView(found.note, []) if found.note else None

    def exact(expr, signed=False) -> str:
        return _exact(_exact_number(expr, values), signed)

    sequence = name_latex(found.sequence)
    intro = ("Against the scaling-law formulas, each as published, on the same configuration: "
             f"their $n_{{ctx}}$ and $seq\\_len$ are ${sequence}$, their $d_{{attn}}$ and "
             "$key\\_size \\cdot num\\_heads$ are $H d_{k}$, and their $n_{layer}$ and "
             "$num\\_layers$ are our $N$ (Kaplan's $N$ counts parameters). Theirs, then each "
             "term by which our matrix products differ, with its formula in the dims above, "
             "then ours: each table adds up exactly.")
    tables = []
    for c in found.comparisons:
        rows = [Row([f"{c.name}, {c.unit}: {c.published}", _latex(c.theirs), exact(c.theirs)])]
        for term in c.terms:
            value = _exact_number(term.formula, values)
            if value == 0:
                continue            # a difference these sizes do not have (d_v = d_k)
            rows.append(Row([term.label, _latex(term.formula), _exact(value, True)]))
        per = "$B$" if c.unit == "per sequence" else f"$B {sequence}$"
        rows.append(Row([f"ours: the matrix products above, {c.unit}", f"divided by {per}",
                         exact(c.ours)]))
        tables.append(rows)
    return ScalingView(intro, tables)


# -- bodies

def _body_view(spec, choices, values, body: BodyCost, calls: list) -> BodyView:
    """One body's view; concrete figures at its first call (``values``: every dim's value)."""
    binding = calls[0][1] if calls else {}

    numbers: dict = {}          # expression -> its number: the steps share their dims and
    shown: dict = {}            # counts, shape -> its text and sizes: and their shapes

    def number(expr) -> "int | _Free":
        found = numbers.get(expr)
        if found is None:
            found = numbers[expr] = _number(sympy.sympify(expr).xreplace(binding), values)
        return found

    def concrete(shape) -> str:
        found = shown.get(shape)
        if found is None:
            sizes = [integer_text(n) if isinstance(n, int) else format(n) for n in map(
                number, ((shape.family,) if shape.family is not None else ()) + shape.dims)]
            found = shown[shape] = f"{shape.text()} = (" + ", ".join(sizes) + \
                ("," if len(sizes) == 1 else "") + ")"
        return found

    equations = []
    meanings = _meanings(spec, choices, body)
    for step in body.steps:
        limits.tick()
        record = step.record
        latex = record.latex
        if isinstance(record, BlockCall):
            meaning = f"{record.block} ({record.instance})" + \
                (f", {record.repeat} copies" if record.repeat is not None else "")
        else:
            meaning = meanings.get(step.output, "")
        params = ", ".join(f"{n} ({s.text()})" for n, s in step.params)
        if isinstance(record, BlockCall) and step.parameters != 0:
            params = f"all of {record.block}'s" + \
                (f", {record.repeat} copies" if record.repeat is not None else "")
        equations.append(EquationView(
            title=f"{step.output}: {meaning}" if meaning else step.output,
            latex=latex, mathml=markup.formula(latex),
            inputs=[f"`{n}` {concrete(s)}" for n, s in step.inputs],
            output=f"`{step.output}` {concrete(step.shape)}",
            parameters=params or "none",
            flops_latex=_plain_latex(step.flops.total),
            flops_number=_count(number(step.flops.total)),
            params_number=_count(number(step.parameters))))
    inputs = [(d.name, d.shape.text()) for d in body.inputs]
    g = diagram.graph(body, inputs)
    where = spec_line(body.block) if body.block else spec_line(spec)
    call_lines = [f"`{path}` with " + (", ".join(f"${name_latex(str(k))} = "
                                                  f"{_plain_latex(v)}$"
                                                  for k, v in b.items()) or "no local dims")
                  + (f", {times} copies" if times != 1 else "")
                  for path, b, times in calls]
    return BodyView(
        name=body.name, anchor=body.name.replace("_", "-"),
        summary=body.name.replace("_", " ").capitalize() if body.block else
        model_summary(spec.title, "these").rstrip("."),
        where=where, calls=call_lines,
        binding=call_lines[0] if call_lines else "",
        equations=equations,
        # Mermaid lines, each label escaped by diagram.mermaid: placed as they are
        mermaid=[markup.Markdown(line) for line in diagram.mermaid(g)],
        svg=Markup(diagram.svg(g, f"dataflow of {body.name}")))


def _meanings(spec, choices, body: BodyCost) -> dict[str, str]:
    """Name -> the meaning the body's first declaration of it in force under ``choices``
    gives (P under learned positions is not the sinusoidal table); one pass over the body."""
    meanings: dict[str, str] = {}
    for s in select(body.block.body if body.block is not None else spec.body, choices):
        name, meaning = getattr(s, "name", None), getattr(s, "meaning", "")
        if name is not None and meaning:
            meanings.setdefault(name, meaning)
    return meanings


class _Free:
    """A number that needs a dim the variant leaves free: shown as a dash, and any arithmetic
    with it is free too."""

    def __format__(self, spec: str) -> str:
        return "—"

    def _same(self, *_):
        return self

    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mul__ = __rmul__ = _same


FREE = _Free()


def _number(expr, values) -> "int | _Free":
    try:
        return int(prove_evaluate(sympy.sympify(expr), values))
    except KeyError:
        return FREE


def _exact_number(expr, values) -> "Fraction | _Free":
    """A count as an exact fraction (a per-token share of a per-sequence product need not be
    whole); free where it needs a free dim."""
    try:
        return Fraction(prove_evaluate(sympy.sympify(expr), values))
    except KeyError:
        return FREE


def _exact(value, signed: bool = False) -> str:
    """An exact count as the pages show it: 1,234,567; a fraction as 1,234 1/3; signed, with
    its sign always (+0 where it is none)."""
    if value is FREE:
        return "—"
    sign = "-" if value < 0 else "+" if signed else ""
    whole, part = divmod(abs(value), 1)
    text = integer_text(int(whole), grouped=True)
    if part:
        text += f" {part.numerator}/{part.denominator}"
    return sign + text


def _latex(expr) -> str:
    return f"${_plain_latex(expr)}$"


def _plain_latex(expr) -> str:
    """A count in LaTeX, common factors pulled out, dims named as in the equations."""
    return _count_latex(sympy.sympify(expr))


@functools.lru_cache(maxsize=4096)
def _count_latex(expr) -> str:
    """``_plain_latex`` of one expression: once per formula (the equations of a page share a
    few: every step of a chain costs 2*B*d), as sympy's printer takes a millisecond each."""
    if expr == 0:
        return "0"
    names = {s: name_latex(str(s)) for s in expr.free_symbols}
    # past SORTED_DIMS dims, the terms in sympy's own order: sorting them as sympy prints them
    # costs the terms times the dims (a stack of 1,600 layers, each its own width: seconds)
    order = {"order": "none"} if len(names) > SORTED_DIMS else {}
    return sympy.latex(sympy.factor_terms(expr), symbol_names=names, **order)


def _symbol(name: str) -> str:
    return f"${name_latex(name)}$"


def _bytes(n) -> str:
    if n is FREE:
        return "—"
    return size_text(n) if n < 2 ** 10 else f"{size_text(n)} ({_count(n)} bytes)"


def _count(n) -> str:
    """A count as the pages show it: 1,234,567 (rounded past numbers.SHOWN_DIGITS digits), a
    dash where it needs a free dim."""
    return integer_text(n, grouped=True) if isinstance(n, int) else f"{n:,}"


def _per(total, per) -> str:
    """``total / per`` to the nearest whole number (both counts; a dash where either needs a
    free dim); past a float's range, the whole part."""
    try:
        return f"{total / per:,.0f}"
    except OverflowError:
        return _count(total // per)


# -- files

def files(variants: list[Variant], format: str = "all", *,
          index: bool = True) -> dict[str, str]:
    """File name -> text: one page per variant and (``index``) their index, in one format or
    both; each headed by tspec's header (``spec.files.HEADERS``)."""
    formats = _formats(format)
    unique_pages(variants, formats)
    pages = [page(v) for v in variants]
    if index:
        compared, grid = comparisons(variants), grid_example(variants)
        about = _index(variants, formats)
    envs = _environments()
    out = {}
    for kind in formats:
        env = envs[kind]
        for p in pages:
            out[f"{p.name}.{kind}"] = headed(f"{p.name}.{kind}", env.get_template(
                f"docs/variant.{kind}.j2").render(page=p, dtype=DTYPE, bytes=BYTES[DTYPE]))
        if index:
            out[f"{INDEX}.{kind}"] = headed(f"{INDEX}.{kind}", env.get_template(
                f"docs/index.{kind}.j2").render(index=about, pages=pages, formats=formats,
                                                 comparisons=compared, grid=grid))
    return out


def _formats(format: str) -> tuple[str, ...]:
    if format not in FORMATS + ("all",):
        raise UsageError(f"unknown docs format {format!r}; formats: md, html, all")
    return FORMATS if format == "all" else (format,)


INDEX = "index"


@dataclass
class IndexView:
    title: str                 # "tspec documentation of the shipped variants"
    intro: list[str]           # its sentences, docs text


def _index(variants: list[Variant], formats: tuple[str, ...]) -> IndexView:
    """The index's title and what it says of itself: of the shipped variants, regenerated by
    `tspec docs`; of others, named, with the command that regenerates them as it was given
    (their paths, `--format` where it was one)."""
    about = ("Generated by `tspec docs` from the spec; each page gives every dimension, shape, "
             "parameter count, FLOP count and activation size of one variant, with dataflow "
             "diagrams.")
    if shipped(variants):
        return IndexView("tspec documentation of the shipped variants", [
            about, ("Regenerate with `tspec docs`; `tspec docs --check` tells when these files "
                   "are stale.")])
    names = [v.name for v in variants]
    title = f"tspec documentation of {_and(names)}" if len(names) <= 3 else \
        f"tspec documentation of {len(names)} variants"
    targets = [target(v) for v in variants]
    if None in targets:                 # a config given in Python: no command names it
        return IndexView(title, [about])
    command = " ".join(["tspec docs", *targets] +
                       ([f"--format {formats[0]}"] if len(formats) == 1 else []))
    return IndexView(title, [about, (
        f"Regenerate with `{command}` and the `--out` and `--set` that wrote them; with "
        "`--check` it tells when these files are stale.")])


def unique_pages(variants: list[Variant], formats: tuple[str, ...]) -> None:
    """Refuse variants whose pages would be one file: a page is named after its variant (a
    variant file's stem, a spec's name), and the index is ``index``. Names that differ only
    in case or Unicode normalisation are one file where the file system ignores those."""
    def key(name: str) -> str:
        return unicodedata.normalize("NFC", name).casefold()

    def files_of(name: str) -> str:
        return " and ".join(f"{name}.{kind}" for kind in formats)

    def given(variant: Variant) -> str:
        return display_path(variant.file) if variant.file else variant.name

    taken: dict[str, Variant | None] = {key(INDEX): None}
    for variant in variants:
        name = page_name(variant)
        if key(name) not in taken:
            taken[key(name)] = variant
            continue
        other = taken[key(name)]
        if other is None:
            raise UsageError(f"{given(variant)} would be written as {files_of(name)}, "
                             "the index of the pages; docs pages are named after their "
                             "variants: rename it")
        if other is variant or other.file is not None and other.file == variant.file:
            raise UsageError(f"{given(variant)} is given twice")
        if page_name(other) == name:
            clash = f"would both be written as {files_of(name)}"
        else:
            clash = (f"would be written as {page_name(other)}.{formats[0]} and "
                     f"{name}.{formats[0]}, one file where case is ignored")
        raise UsageError(f"{given(other)} and {given(variant)} {clash}; docs pages are named "
                         "after their variants: rename one")


def _environments() -> dict:
    """The templates' environments: HTML escapes every value it places (autoescape) and
    draws docs text with ``rich``; Markdown escapes every value with ``markup.markdown``
    (finalize) unless a filter made it Markdown already."""
    base = environment()
    html = base.overlay()
    html.filters = {**base.filters, "rich": markup.rich, "page_link": markup.page_link}
    md = base.overlay(finalize=markup.finalize)
    md.filters = {**base.filters, "cell": markup.cell, "cells": markup.cells,
                  "code": markup.code, "latex": markup.latex, "page_link": markup.page_link}
    return {"html": html, "md": md}


def shipped_variants() -> list[Variant]:
    """Every built-in variant, in name order."""
    return [api.load(name) for name in sorted(api.builtin_variants())]


def default_dir(variants: list[Variant] | None = None) -> Path:
    """Where pages go unless --out says: docs/variants in the checkout for tspec's own variants
    as shipped (``variants`` None: every one), the working directory for any other, or for any
    made with --set: no command writes a user's pages into tspec's tree unasked."""
    if variants is None or all(api.is_builtin(v) and not settings_given(v) for v in variants):
        return api.in_checkout(Path("docs") / "variants", "docs", "--out DIR")
    return Path.cwd()


def page_name(variant: Variant) -> str:
    """The name of a variant's pages: its own, and for one made with --set the settings after
    it (``base+H=16+norm=pre``, every character safe in a file's name), so that it never takes
    the name of the variant's own page (past MAX_PAGE_NAME bytes, a digest of the settings)."""
    given = settings_given(variant)
    if not given:
        return variant.name
    suffix = "".join(f"+{_file_safe(text)}" for text in given)
    name = variant.name + suffix
    if len(name.encode()) > MAX_PAGE_NAME:      # within a file name's 255 bytes, and unique
        name = f"{variant.name[:MAX_PAGE_NAME // 2]}+{hashlib.sha256(suffix.encode()).hexdigest()[:12]}"
    return name


MAX_PAGE_NAME = 120     # bytes of a page's name; past it, a --set suffix is a digest of itself
_UNSAFE = re.compile(r"[^A-Za-z0-9._=-]")


def _file_safe(text: str) -> str:
    return _UNSAFE.sub("_", text)


def plan(out: Path, variants: list[Variant], format: str = "all") -> tuple[bool, str]:
    """Whether a run of ``variants`` into ``out`` writes the index, and if not, the line that
    says why: it is written only where every variant an index already there lists is among
    them (the shipped index by `tspec docs` of every shipped variant), so that a partial run
    never rewrites an index of pages it did not build."""
    names = {page_name(v) for v in variants}
    missing: list[str] = []
    for kind in _formats(format):
        listed = _indexed(out / f"{INDEX}.{kind}", kind)
        missing += [name for name in sorted(listed - names) if name not in missing]
    if not missing:
        return True, ""
    shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3
                                      else "")
    files = " and ".join(f"{INDEX}.{kind}" for kind in _formats(format))
    return False, (f"not written: {files}, which list{'s' if len(files.split()) == 1 else ''} "
                   f"{len(missing)} variant{'s' * (len(missing) != 1)} this run did not "
                   f"document ({shown}); document all of them in one run to write "
                   f"{'it' if len(files.split()) == 1 else 'them'}")


_LISTED = {"md": re.compile(r"^\| .*\]\(([^()\s]+)\.md\) \|(?: \[.*\]\(\1\.html\) \|)?$",
                            re.MULTILINE),
           "html": re.compile(r'<tr><td><a href="([^"<>]+)\.html">')}


def _indexed(path: Path, kind: str) -> set[str]:
    """The variants an index tspec wrote lists (its pages' links); none where there is no
    index, or one tspec did not write (which the write then refuses, unless --force)."""
    try:
        with open_regular(path) as stream:
            text = stream.read(MAX_INDEX).decode("utf-8", "replace")
    except OSError:
        return set()
    if not tspecs(text.encode()):
        return set()
    return {urllib.parse.unquote(link) for link in _LISTED[kind].findall(text)}


MAX_INDEX = 16 << 20    # bytes of an index read to learn what it lists


def write(out: Path, variants: list[Variant], format: str = "all", *,
          force: bool = False, manual: Path | None = None) -> tuple[list[Path], str]:
    """Write every page, and the index where ``plan`` says, or none (``spec.files.
    write_outputs``: each all old or all new, and a file there that tspec did not write
    refused unless ``force``); with ``manual``, the manual's folder, the op reference there
    too, in the same run; the paths written, and the line saying why the index was not."""
    index, why = plan(out, variants, format)
    pages = files(variants, format, index=index)   # every page made before any is written
    written = {inside(out, name): text for name, text in pages.items()}
    if manual is not None:
        written |= {inside(manual, name): text for name, text in reference.files().items()}
    write_outputs(written, force=force)
    return list(written), why


def stale(out: Path, variants: list[Variant], format: str = "all", *,
          manual: Path | None = None) -> str:
    """A unified diff of every page that differs from what generation gives (the index where a
    write would write it; with ``manual``, the op reference in that folder); '' when none."""
    index, _ = plan(out, variants, format)
    expected = {inside(out, name): text
                for name, text in files(variants, format, index=index).items()}
    if manual is not None:
        expected |= {inside(manual, name): text for name, text in reference.files().items()}
    return "".join(stale_diff(path, text) for path, text in expected.items())


OPS_PAGE = reference.PAGE     # the op reference, in the manual's folder


def manual_dir() -> Path:
    """The manual's folder in the checkout, docs/manual, where the op reference goes."""
    return api.in_checkout(Path("docs") / "manual", "the manual", "--out DIR")
