"""Grids: every combination of some dims' values, judged against one proof.

    tspec check base --grid d_model=256:1024:64 --grid H=4,8,12,16

The spec is proved once, symbolically, under the variant's choices (``spec.check`` with no dim
values: every shape agrees for every size the constraints allow). Each combination then needs
only what ``spec.check`` does with dim values given: derived dims evaluated, every constraint
whose dims all have values evaluated (a combination that breaks one is invalid and names it),
and, where no constraint is broken, a derived dim that comes out fractional or below 1 makes it
invalid too. Valid combinations get the model's parameters, forward FLOPs and activation memory
from ``spec.counts``, at the sizes the docs pages give the dims left free (``free_sizes``:
B = 1, T and T_dec max_len or 512) and in the docs' dtype. ``plan`` does the symbolic work
once (the axes checked against the spec, the proof, the costs as expressions); ``judge``
evaluates all combinations at once, exactly, with ``spec.evaluate``: nothing a user writes is
evaluated as code.

An axis is ``NAME=START:STOP:STEP`` (STOP included), ``NAME=A,B,C`` or ``NAME=VALUE``; the
first axis varies slowest.
"""

import csv
import io
import json
import math
import numbers
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np

from tspec.analysis.counts import DTYPE, costs, free_sizes, used_dims
from tspec.analysis.evaluate import Evaluator, Exact, as_integers, free_symbols
from tspec.checking import limits
from tspec.checking.check import check as check_spec
from tspec.checking.findings import display_path, format_value
from tspec.checking.report import Report, check_variant, require_none, sizes_text
from tspec.errors import GridError
from tspec.language.model import Constraint, Let, choices_in_force, select
from tspec.language.variant import MAX_DIGITS, Variant, dim_value, shown, unknown_dim
from tspec.numbers import exact, integer_text, shown_json
from tspec.symbolic.expr import degree, derived_degrees

MAX_COMBINATIONS = 1_000_000
CHUNK = 16_384          # combinations judged, counted and written at a time, at most
CHUNK_DIGITS = 2 ** 24  # and fewer where each number may have more digits than this / CHUNK
SYNTAX = "NAME=START:STOP:STEP, NAME=A,B,C or NAME=VALUE"
COUNTS = ("parameters", "flops", "activation_bytes")
LABELS = {"parameters": "parameters", "flops": "FLOPs", "activation_bytes": "activation bytes"}
ONLY = ("valid", "invalid")
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_DIGITS = re.compile(r"[0-9]+(?:_[0-9]+)*\Z")


# ---------------------------------------------------------------------------------------------
# Axes

@dataclass(frozen=True)
class Axis:
    """One dim the grid varies, its values in order, and how it was given (for errors)."""
    name: str
    values: range | tuple[int, ...]
    source: str

    @property
    def size(self) -> int:
        values = self.values
        if isinstance(values, range):      # len() fails past sys.maxsize
            return max(0, -(-(values.stop - values.start) // values.step))
        return len(values)

    def take(self, indices: np.ndarray) -> np.ndarray:
        """The values at these positions (an int64 array of them)."""
        values = self.values
        if isinstance(values, range) and max(values[0], values[-1]) < 2 ** 62:
            # every value below 2**62: start + step * index cannot overflow (a step that
            # large only in a one-value range, whose index is 0)
            return np.int64(values.start) + np.int64(min(values.step, 2 ** 62)) * indices
        return as_integers([values[i] for i in indices.tolist()])


def parse_axis(text: str) -> Axis:
    """``NAME=START:STOP:STEP`` (STOP included), ``NAME=A,B,C`` or ``NAME=VALUE``."""
    source = shown("--grid", text)
    if text.count("=") != 1:
        raise GridError(f"{source}: expected {SYNTAX}")
    name, values = (part.strip() for part in text.split("="))
    if not _NAME.match(name):
        raise GridError(f"{source}: {name!r} is not a dim name")
    return Axis(name, _parse_values(values, source), source)


def _parse_values(text: str, source: str) -> range | tuple[int, ...]:
    if not text:
        raise GridError(f"{source}: no values after '='; expected {SYNTAX}")
    if ":" in text:
        parts = [part.strip() for part in text.split(":")]
        if len(parts) != 3:
            raise GridError(f"{source}: a range is START:STOP:STEP (STOP included)")
        start, stop = (dim_value(part, source, GridError) for part in parts[:2])
        step = parts[2]
        if not _DIGITS.match(step) or len(step) > MAX_DIGITS or int(step) == 0:
            raise GridError(f"{source}: STEP must be a positive integer, got {step!r}")
        if start > stop:
            raise GridError(f"{source}: START {start} is greater than STOP {stop}, so the "
                            "range is empty")
        return range(start, stop + 1, int(step))
    return _distinct(tuple(dim_value(part.strip(), source, GridError)
                           for part in text.split(",")), source)


def _distinct(values: tuple[int, ...], source: str) -> tuple[int, ...]:
    seen = set()
    for value in values:
        if value in seen:
            raise GridError(f"{source}: {value} is listed twice")
        seen.add(value)
    return values


def axes_from(mapping: Mapping) -> list[Axis]:
    """The API's axes: dim name -> the values (a range, a sequence of positive integers, or
    text in --grid syntax)."""
    axes = []
    for name, values in mapping.items():
        source = f"grid {name}"
        if not isinstance(name, str) or not _NAME.match(name):
            raise GridError(f"grid: {name!r} is not a dim name")
        if isinstance(values, str):
            axes.append(Axis(name, _parse_values(values.strip(), source), source))
            continue
        if not isinstance(values, range):
            values = tuple(values)
            for value in values:
                if isinstance(value, bool) or not isinstance(value, numbers.Integral) or \
                        value < 1:
                    raise GridError(f"{source}: dim values are positive integers, got "
                                    f"{value!r}")
                if value >= 10 ** MAX_DIGITS:
                    raise GridError(f"{source}: a value of more than {MAX_DIGITS} digits")
            values = _distinct(tuple(int(v) for v in values), source)
        axis = Axis(name, values, source)
        if axis.size == 0:
            raise GridError(f"{source}: no values")
        if isinstance(values, range) and min(values[0], values[-1]) < 1:
            raise GridError(f"{source}: dim values are positive integers, got "
                            f"{min(values[0], values[-1])}")
        axes.append(axis)
    return axes


def _validate(axes: list[Axis], variant: Variant, settings: set[str], lets: dict) -> None:
    spec = variant.spec
    if not axes:
        raise GridError("a grid needs at least one dim to vary")
    seen: set[str] = set()
    for axis in axes:
        name = axis.name
        if name in seen:
            raise GridError(f"--grid {name} is given twice")
        seen.add(name)
        if name in settings:
            raise GridError(f"{name} is both fixed (--set) and varied (--grid); give it once")
        if name in spec.choices:
            raise GridError(f"{axis.source}: {name} is a choice, not a dim; a grid varies "
                            f"dims (fix a choice with --set {name}=OPTION)")
        if name not in spec.dims:
            raise GridError(f"{axis.source}: {unknown_dim(name, spec)}")
        if name in lets:
            raise GridError(f"{axis.source}: {name} is derived under these choices (let "
                            f"{name} = {lets[name].text}); vary the dims it is defined from")
        if spec.dims[name].value is not None:
            raise GridError(f"{axis.source}: {name} is fixed to {spec.dims[name].value} by "
                            "the spec")
    count = math.prod(axis.size for axis in axes)
    if count > MAX_COMBINATIONS:
        raise GridError(f"the grid has {count:,} combinations; the limit is "
                        f"{MAX_COMBINATIONS:,} (narrow a range or take a larger STEP)")


# ---------------------------------------------------------------------------------------------
# The result

@dataclass(frozen=True)
class Break:
    """Why a combination is invalid: a constraint it breaks, or a derived dim it leaves
    fractional or below 1 (the finding kinds ``spec.check`` gives)."""
    kind: str            # "constraint-violated" or "not-integral"
    statement: str       # "require d_model % H == 0", "let d_k = d_model / H"
    file: str | None
    line: int | None

    def text(self) -> str:
        where = ":".join(str(p) for p in (display_path(self.file) if self.file else None,
                                          self.line) if p is not None)
        return f"{self.statement} ({where})" if where else self.statement

    def as_dict(self) -> dict:
        return {"kind": self.kind, "statement": self.statement,
                "file": display_path(self.file) if self.file else None, "line": self.line}


@dataclass(frozen=True)
class Point:
    """One combination: its values, whether the spec allows it, and what the model costs."""
    dims: dict[str, int]
    valid: bool
    derived: dict[str, int | str | None]     # a fraction as "85/2"; None: a division by zero
    parameters: int | None                   # None: invalid, or a dim it needs has no value
    flops: int | None
    activation_bytes: int | None
    breaks: tuple[Break, ...]

    def as_dict(self) -> dict:
        return {"dims": self.dims, "valid": self.valid, "derived": self.derived,
                "parameters": self.parameters, "flops": self.flops,
                "activation_bytes": self.activation_bytes,
                "breaks": [b.as_dict() for b in self.breaks]}


@dataclass
class Chunk:
    """Consecutive combinations, the first at index ``start``, judged and counted."""
    start: int
    columns: dict[str, np.ndarray]    # each axis's value at each combination
    valid: np.ndarray                 # bool per combination
    broken: np.ndarray                # bool (reason, combination)
    derived: dict[str, Exact]         # derived dims at each combination
    counts: dict[str, tuple[np.ndarray, np.ndarray] | None]   # values, and where counted

    def __len__(self) -> int:
        return len(self.valid)

    def shown(self, only: str | None) -> np.ndarray:
        """Where ``only`` keeps a combination (bool per combination)."""
        if only is None:
            return np.ones(len(self), dtype=bool)
        return self.valid if only == "valid" else ~self.valid

    def points(self, reasons: list[Break], only: str | None = None) -> Iterator[Point]:
        count = len(self)
        indices = range(count) if only is None else np.flatnonzero(self.shown(only)).tolist()
        columns = {name: column.tolist() for name, column in self.columns.items()}
        valid = self.valid.tolist()
        broken = self.broken.T.tolist()
        derived = {name: _per_point(value, count) for name, value in self.derived.items()}
        counts = [None if entry is None else (entry[0].tolist(), entry[1].tolist())
                  for entry in (self.counts[key] for key in COUNTS)]
        for i in indices:
            yield Point(
                {name: column[i] for name, column in columns.items()}, valid[i],
                {name: values[i] for name, values in derived.items()},
                *(None if entry is None or not entry[1][i] else int(entry[0][i])
                  for entry in counts),
                tuple(reason for reason, hit in zip(reasons, broken[i]) if hit))

    def widths(self, axes: list[Axis], reasons: list[Break], only: str | None) -> list[int]:
        """The widths the text table's cells take for the combinations shown (0 where none
        is), worked out from the extremes of each column, not by writing every cell."""
        shown = self.shown(only)
        if not shown.any():
            return [0] * (len(axes) + 5)
        widths = [len(str(self.columns[axis.name][shown].max())) for axis in axes]
        widths.append(3 if (shown & self.valid).any() else 2)      # yes, no
        for key in COUNTS:
            entry = self.counts[key]
            counted = shown & entry[1] if entry is not None else np.zeros_like(shown)
            width = 1 if (shown & ~counted).any() else 0             # a dash
            values = entry[0][counted] if entry is not None else ()
            if len(values) and values.dtype == object:
                width = max(width, *(len(integer_text(v, grouped=True))
                                     for v in values.tolist()))
            elif len(values):                 # int64: the widest is the largest or smallest
                width = max(width, *(len(integer_text(int(v), grouped=True))
                                     for v in (values.max(), values.min())))
            widths.append(width)
        if reasons:
            hits = self.broken[:, shown]
            lengths = np.array([len(reason.text()) for reason in reasons]) @ hits + \
                2 * np.maximum(hits.sum(axis=0) - 1, 0)
            widths.append(int(lengths.max()))
        else:
            widths.append(0)
        return widths


@dataclass
class Grid:
    """Every combination of the axes' values, judged against one proof: worked out a chunk
    of CHUNK combinations at a time, as they are read or written, so that memory stays what
    one chunk takes however many combinations there are."""
    variant: Variant
    axes: list[Axis]
    choices: dict[str, str]           # the choices in force
    fixed: dict[str, int]             # the dim values every combination shares
    sizes: dict[str, object]          # sizes the counts give free dims (B = 1, T = max_len)
    free: list[str]                   # dims the counts need that have no value
    proof: Report
    reasons: list[Break]
    plan: "Plan"
    counted: dict[str, bool]          # for each count: whether every dim it needs has a value
    chunk: int = CHUNK                # combinations judged at a time
    known_valid: int | None = None    # how many combinations are valid, once counted

    @property
    def proved(self) -> bool:
        return self.proof.ok

    def __len__(self) -> int:
        return math.prod(axis.size for axis in self.axes) if self.proved else 0

    def chunks(self, counted: bool = True) -> Iterator[Chunk]:
        """The combinations in order, CHUNK at a time, judged (and with ``counted``,
        counted)."""
        for start in range(0, len(self), self.chunk):
            limits.doing(f"judging the combinations of the grid of {self.variant.name}")
            yield _judge(self, start, min(start + self.chunk, len(self)), counted)

    @property
    def valid_count(self) -> int:
        if self.known_valid is None:
            self.known_valid = sum(int(np.count_nonzero(chunk.valid))
                                   for chunk in self.chunks(counted=False))
        return self.known_valid

    @property
    def invalid_count(self) -> int:
        return len(self) - self.valid_count

    def summary(self) -> str:
        return f"{len(self):,} combinations: {self.valid_count:,} valid, " \
               f"{self.invalid_count:,} invalid"

    def points(self, only: str | None = None) -> Iterator[Point]:
        """The combinations in order (the first axis slowest); ``only`` "valid" or "invalid"
        keeps those."""
        _only(only)
        for chunk in self.chunks():
            yield from chunk.points(self.reasons, only)

    # -- output
    def header(self) -> list[str]:
        variant = self.variant
        where = f" ({display_path(variant.file)})" if variant.file else ""
        names = ", ".join(axis.name for axis in self.axes)
        lines = [f"== {variant.name}{where}: grid over {names} ({len(self):,} combinations)"]
        scope = "choices " + ", ".join(f"{k}={v}" for k, v in self.choices.items()) \
            if self.choices else "the spec as written"
        lines.append(f"   proved once, for every size the constraints allow ({scope})")
        if self.fixed:
            lines.append("   fixed: " + ", ".join(f"{k}={v}" for k, v in self.fixed.items()))
        sizes = ", ".join(f"{k}={v}" for k, v in self.sizes.items())
        lines.append(f"   counted at {sizes + '; ' if sizes else ''}activation memory in "
                     f"{DTYPE}")
        if self.free:
            missing = [LABELS[key] for key in COUNTS if not self.counted[key]]
            lines.append(f"   no value for {', '.join(self.free)}: {', '.join(missing)} "
                         "not counted (--set or --grid one)")
        return lines

    def text(self, only: str | None = None) -> str:
        """The header, a table of the combinations, and the summary line."""
        return "".join(self.text_parts(only))

    def text_parts(self, only: str | None = None) -> Iterator[str]:
        """``text`` a chunk at a time: a first pass over the combinations finds the columns'
        widths (and counts the valid ones), the second writes the rows."""
        _only(only)
        headers = [axis.name for axis in self.axes] + ["valid", *LABELS.values(), "breaks"]
        widths = [len(h) for h in headers]
        valid = 0
        for chunk in self.chunks():
            valid += int(np.count_nonzero(chunk.valid))
            widths = [max(pair) for pair in zip(widths,
                                                chunk.widths(self.axes, self.reasons, only))]
        self.known_valid = valid
        right = len(self.axes) + 4           # numbers right-aligned, valid and breaks left

        def line(cells):
            return "  ".join(c.rjust(w) if i < right and i != len(self.axes) else c.ljust(w)
                             for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
        yield "\n".join(self.header() + ["", line(headers),
                                         line(["-" * w for w in widths])]) + "\n"
        texts = {id(reason): reason.text() for reason in self.reasons}
        for chunk in self.chunks():
            rows = [line([str(point.dims[axis.name]) for axis in self.axes]
                         + ["yes" if point.valid else "no"]
                         + ["—" if f is None else integer_text(f, grouped=True)
                            for f in (point.parameters, point.flops, point.activation_bytes)]
                         + ["; ".join(texts[id(b)] for b in point.breaks)])
                    for point in chunk.points(self.reasons, only)]
            if rows:
                yield "\n".join(rows) + "\n"
        shown = "" if only is None else f" (shown: the {only} ones)"
        yield "\n" + self.summary() + shown + "\n"

    def as_dict(self, only: str | None = None) -> dict:
        head = self._head()
        return {**{key: value for key, value in head.items() if key != "axes"},
                "axes": {name: list(values) for name, values in head["axes"].items()},
                "combinations": len(self), "valid": self.valid_count,
                "invalid": self.invalid_count,
                "points": [point.as_dict() for point in self.points(only)]}

    def _head(self) -> dict:
        variant = self.variant
        return {
            "target": variant.name,
            "file": display_path(variant.file) if variant.file else None,
            "choices": self.choices,
            "fixed": self.fixed,
            "sizes": {k: v if isinstance(v, int) else str(v) for k, v in self.sizes.items()},
            "dtype": DTYPE,
            "axes": {axis.name: axis.values for axis in self.axes},
        }

    def json_parts(self, only: str | None = None) -> Iterator[str]:
        """``to_json(as_dict(only))`` a chunk at a time: the same text, never all in memory
        (the valid combinations are counted first: their number comes before the points)."""
        _only(only)
        valid = self.valid_count
        head = self._head()
        axes = head.pop("axes")
        yield "{\n" + "".join(f"  {json.dumps(key)}: {_json(value, 1)},\n"
                              for key, value in head.items())
        yield '  "axes": {\n'
        for index, (name, values) in enumerate(axes.items()):
            yield f"    {json.dumps(name)}: "
            # the values: integers of at most MAX_DIGITS digits, as JSON writes them
            yield from _json_list(((",\n" + "  " * 3).join(
                str(v) for v in values[start:start + CHUNK])
                for start in range(0, len(values), CHUNK)), 2)
            yield ",\n" if index < len(axes) - 1 else "\n"
        yield "  },\n" + "".join(f"  {json.dumps(key)}: {_json(value, 1)},\n" for key, value in (
            ("combinations", len(self)), ("valid", valid), ("invalid", len(self) - valid)))
        yield '  "points": '
        breaks = {id(reason): _json(reason.as_dict(), 4) for reason in self.reasons}
        yield from _json_list((",\n    ".join(_point_json(point, breaks) for point in
                                              chunk.points(self.reasons, only))
                               for chunk in self.chunks()), 1)
        yield "\n}\n"

    def csv(self, only: str | None = None) -> str:
        """One row per combination: the axes, valid (true/false), the counts (empty where
        not counted), and what it breaks."""
        return "".join(self.csv_parts(only))

    def csv_parts(self, only: str | None = None) -> Iterator[str]:
        """``csv`` a chunk at a time."""
        _only(only)
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow([axis.name for axis in self.axes] + ["valid", *COUNTS, "breaks"])
        yield out.getvalue()
        texts = {id(reason): reason.text() for reason in self.reasons}
        valid = 0
        for chunk in self.chunks():
            valid += int(np.count_nonzero(chunk.valid))
            out = io.StringIO()
            writer = csv.writer(out, lineterminator="\n")
            for point in chunk.points(self.reasons, only):
                figures = [point.parameters, point.flops, point.activation_bytes]
                writer.writerow([point.dims[axis.name] for axis in self.axes]
                                + ["true" if point.valid else "false"]
                                + ["" if f is None else integer_text(f) for f in figures]
                                + ["; ".join(texts[id(b)] for b in point.breaks)])
            yield out.getvalue()
        self.known_valid = valid             # counted on the way: no second pass for it


def _only(only: str | None) -> None:
    if only not in (None,) + ONLY:
        raise GridError(f"only: {only!r} is neither 'valid' nor 'invalid'")


def _json(value, level: int) -> str:
    """``value`` as ``to_json`` writes it at nesting ``level`` (two spaces a level)."""
    return json.dumps(shown_json(value), indent=2).replace("\n", "\n" + "  " * level)


def _point_json(point: Point, breaks: dict) -> str:
    """``_json(point.as_dict(), 2)``, written by hand for speed (json.dumps with an indent
    is pure Python): the same text. ``breaks``: each reason's, at its nesting, by its id."""
    def table(values: dict) -> str:
        if not values:
            return "{}"
        return "{\n" + ",\n".join(f"        {json.dumps(name)}: {_scalar(value)}"
                                   for name, value in values.items()) + "\n      }"
    listed = "[]" if not point.breaks else "[\n" + ",\n".join(
        "        " + breaks[id(b)] for b in point.breaks) + "\n      ]"
    return (f'{{\n      "dims": {table(point.dims)},\n'
            f'      "valid": {"true" if point.valid else "false"},\n'
            f'      "derived": {table(point.derived)},\n'
            f'      "parameters": {_scalar(point.parameters)},\n'
            f'      "flops": {_scalar(point.flops)},\n'
            f'      "activation_bytes": {_scalar(point.activation_bytes)},\n'
            f'      "breaks": {listed}\n    }}')


def _scalar(value) -> str:
    """A number, text or None as ``to_json`` writes it (integers it would round as text)."""
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value) if exact(value) else json.dumps(integer_text(value))
    return json.dumps(value)


def _json_list(batches: Iterator[str], level: int) -> Iterator[str]:
    """A JSON list at nesting ``level``, its items written a batch at a time (each batch the
    items' text at ``level + 1``, joined), as ``json.dumps(..., indent=2)`` writes it: ``[]``
    when there are none."""
    indent, first = "  " * (level + 1), True
    for batch in batches:
        if batch:
            yield ("[\n" if first else ",\n") + indent + batch
            first = False
    yield "[]" if first else "\n" + "  " * level + "]"


def _per_point(value: Exact, count: int) -> list:
    """A derived dim at each combination: an integer, a fraction as text ("85/2"), or None
    where it divides by zero."""
    nums = np.broadcast_to(value.num, (count,)).tolist()
    dens = np.broadcast_to(value.den, (count,)).tolist()
    return [None if den == 0 else int(num) if den == 1 else format_value(Fraction(num, den))
            for num, den in zip(nums, dens)]


# ---------------------------------------------------------------------------------------------
# Evaluation

@dataclass(frozen=True)
class Plan:
    """What a grid needs from the symbolic side, worked out once: the proof, the statements
    in force, and the counts as expressions in the dims."""
    variant: Variant
    choices: dict[str, str]          # every choice, set
    proof: Report                    # what `tspec check` says, the varied dims at a value
    lets: list[Let]
    constraints: list[Constraint]
    counts: dict[str, object]        # COUNTS key -> its expression
    used: set[str]                   # the dims the counts use (for free_sizes)


def plan(variant: Variant, axes: list[Axis], settings: set[str] = frozenset()) -> Plan:
    """Check the axes against the spec, prove it under the variant's choices (no dim values),
    and cost the model symbolically; ``settings``: the dims --set fixes."""
    spec = variant.spec
    choices = spec.choice_values(variant.choices)
    statements = select(spec.body, choices)
    lets = [s for s in statements if isinstance(s, Let)]
    _validate(axes, variant, settings, {let.dim: let for let in lets})
    # the proof, and the variant's values against its choices, the dims the grid varies
    # among them (H_kv varied under key_value_heads = all is varied for nothing)
    varied = replace(variant, dims=variant.dims | {a.name: a.values[0] for a in axes if a.size},
                     places=variant.places | {a.name: (None, a.source) for a in axes})
    # (at the first combination, as `tspec check` checks it there, but for the constraints
    # and derived dims, which each combination is judged by)
    report = check_variant(varied, None)
    proof = Report(variant, report.proof, report.concrete, [
        f for f in report.findings if f.kind not in ("constraint-violated", "not-integral")
        or f.scope != "variant"])
    counts, used = dict.fromkeys(COUNTS), set()
    if proof.ok:
        bodies = costs(spec, choices)
        model = bodies[spec.name]
        counts = {"parameters": model.parameters, "flops": model.flops.total,
                  "activation_bytes": model.activations.bytes(DTYPE)}
        used = used_dims(spec, choices, bodies)
    return Plan(variant, choices, proof, lets,
                [s for s in statements if isinstance(s, Constraint)], counts, used)


def evaluate(variant: Variant, axes: list[Axis], settings: set[str] = frozenset()) -> Grid:
    """Prove once, then judge and count every combination of the axes' values (as they are
    read: see Grid)."""
    return judge(plan(variant, axes, settings), axes)


def judge(plan: Plan, axes: list[Axis]) -> Grid:
    """The grid of every combination of the axes' values: what all combinations share (the
    fixed dims, the sizes free dims take, which counts have every dim they need) worked out
    here; each combination is judged and counted as it is read (none when the proof failed:
    no combination can be judged against it)."""
    variant, lets, constraints = plan.variant, plan.lets, plan.constraints
    spec = variant.spec
    grid_names = {axis.name for axis in axes}
    fixed = {name: dim.value for name, dim in spec.dims.items() if dim.value is not None}
    fixed |= {name: value for name, value in variant.dims.items() if name not in grid_names}
    reasons = [Break("constraint-violated", f"require {c.text}", c.file, c.line)
               for c in constraints] + [Break("not-integral", f"let {let.dim} = {let.text}",
                                              let.file, let.line) for let in lets]
    sizes, free, counted = _count_setup(plan, fixed, grid_names) if plan.proof.ok else \
        ({}, [], dict.fromkeys(COUNTS, False))
    if plan.proof.ok:
        _require_sizes(plan, fixed, sizes)
    return Grid(variant, axes, choices_in_force(spec, plan.choices), fixed, sizes, free,
                plan.proof, reasons, plan, counted, _chunk(plan, fixed, axes))


def _require_sizes(plan: Plan, fixed: dict, sizes: dict) -> None:
    """The sizes the counts give the dims left free, with the dims every combination shares,
    checked as `tspec docs` and `tspec diff` check theirs: a constraint they break whatever
    the dims varied (require T_dec <= 100 at T_dec = max_len = 1024) leaves no combination
    to count, and is said so, once."""
    numbers = {name: size for name, size in sizes.items() if isinstance(size, int)}
    if not numbers:
        return
    found = check_spec(plan.variant.spec, plan.choices, {**fixed, **numbers}).findings
    # (one over the fixed dims alone breaks every combination: each is judged so, below)
    require_none([f for f in found if f.scope == "variant" and set(f.dims) & set(numbers)],
                 f"in {plan.variant.name} at the sizes it is counted at "
                 f"({sizes_text(numbers)})", "no combination judged")


def _chunk(plan: Plan, fixed: dict, axes: list[Axis]) -> int:
    """How many combinations to judge at a time: CHUNK, or fewer where a number may have
    more than CHUNK_DIGITS / CHUNK digits (the largest value's digits times the largest degree
    of what is computed from it: a count of a dim derived as d**192 from a 40-digit d has
    thousands), so that a chunk's numbers take about CHUNK_DIGITS digits at most."""
    symbols = plan.variant.spec.symbols()
    degrees = derived_degrees({symbols[let.dim]: let.expr for let in plan.lets})
    exprs = [c.relation for c in plan.constraints] + [e for e in plan.counts.values()
                                                      if e is not None]
    largest = max([degree(e, degrees) for e in exprs] + list(degrees.values()) + [1])
    values = [*fixed.values(), *(max(axis.values[0], axis.values[-1]) if
                                 isinstance(axis.values, range) else max(axis.values)
                                 for axis in axes)]
    digits = max(len(str(value)) for value in values) + 1
    return max(1, min(CHUNK, CHUNK_DIGITS // (largest * digits)))


def _judge(grid: Grid, start: int, stop: int, counted: bool) -> Chunk:
    """Combinations start .. stop - 1 judged against the constraints (and with ``counted``,
    counted), all at once."""
    plan = grid.plan
    symbols = plan.variant.spec.symbols()
    columns = _combinations(grid.axes, start, stop)
    count = stop - start
    values = {symbols[name]: value for name, value in {**grid.fixed, **columns}.items()}
    evaluator = Evaluator(values)
    # judged at the sizes it is counted at (T_dec = max_len, B = 1): a constraint over them
    # and the dims varied (require T_dec <= d_model) is one its counts must meet
    sized = _sized(evaluator, grid.sizes, symbols)
    derived = _derive(evaluator, plan.lets, symbols, set(values) | sized)
    broken = _broken(evaluator, plan.constraints, plan.lets, derived, symbols,
                     set(values) | sized, count)
    valid = ~broken.any(axis=0) if len(grid.reasons) else np.ones(count, dtype=bool)
    counts = _counts(grid, values, valid) if counted else dict.fromkeys(COUNTS)
    return Chunk(start, columns, valid, broken,
                 {let.dim: derived[symbols[let.dim]] for let in plan.lets
                  if symbols[let.dim] in derived}, counts)


def _combinations(axes: list[Axis], start: int, stop: int) -> dict[str, np.ndarray]:
    """Each axis's value at combinations start .. stop - 1, the first axis varying slowest."""
    index = np.unravel_index(np.arange(start, stop, dtype=np.int64),
                             tuple(axis.size for axis in axes))
    arrays = [axis.take(i) for axis, i in zip(axes, index)]
    if any(a.dtype == object for a in arrays):
        arrays = [a.astype(object) for a in arrays]
    return {axis.name: array for axis, array in zip(axes, arrays)}


def _sized(evaluator: Evaluator, sizes: dict, symbols: dict) -> set:
    """The dims the counts give sizes (``free_sizes``), put into the evaluator: their symbols."""
    for name, size in sizes.items():
        evaluator.memo[symbols[name]] = evaluator.value(size)
    return {symbols[name] for name in sizes}


def _derive(evaluator: Evaluator, lets: list[Let], symbols: dict, known: set) -> dict:
    """Every derived dim whose definition has values, through the others (dependency order):
    dim symbol -> its value at each combination."""
    derived: dict = {}
    pending = list(lets)
    while pending:
        ready = [let for let in pending if let.expr.free_symbols <= known | set(derived)]
        if not ready:
            break
        for let in ready:
            symbol = symbols[let.dim]
            derived[symbol] = evaluator.value(let.expr)
            evaluator.memo[symbol] = derived[symbol]
            pending.remove(let)
    return derived


def _broken(evaluator: Evaluator, constraints: list[Constraint], lets: list[Let],
            derived: dict, symbols: dict, given: set, count: int) -> np.ndarray:
    """Which reason each combination breaks, as ``spec.check`` judges a variant: every
    constraint whose dims have values (derived ones from the given dims alone, skipped where
    they divide by zero); where none is broken, each such derived dim that is fractional or
    below 1."""
    direct = {symbols[let.dim]: derived[symbols[let.dim]] for let in lets
              if let.expr.free_symbols <= given}
    rows = []
    for constraint in constraints:
        relation = constraint.relation
        if not relation.free_symbols <= given | set(direct):
            rows.append(np.zeros(count, dtype=bool))
            continue
        undefined = np.zeros(count, dtype=bool)
        for symbol in relation.free_symbols & set(direct):
            undefined |= ~direct[symbol].defined
        rows.append(np.broadcast_to(~evaluator.holds(relation) & ~undefined, (count,)))
    any_broken = np.logical_or.reduce(rows) if rows else np.zeros(count, dtype=bool)
    for let in lets:
        value = direct.get(symbols[let.dim])
        if value is None:
            rows.append(np.zeros(count, dtype=bool))
            continue
        whole = value.whole & (value.num >= 1)
        rows.append(np.broadcast_to(~whole & ~any_broken, (count,)))
    return np.array(rows, dtype=bool).reshape(len(rows), count)


def _count_setup(plan: Plan, fixed: dict, varied: set[str]):
    """What every combination shares about the counts: the sizes free dims take, the dims
    the counts need that have none, and whether each count has every dim it needs (from the
    dims that have values, fixed or varied, and the derived dims defined from those)."""
    spec = plan.variant.spec
    symbols = spec.symbols()
    known = {symbols[name] for name in [*fixed, *varied]}
    pending = list(plan.lets)
    while ready := [let for let in pending if let.expr.free_symbols <= known]:
        known |= {symbols[let.dim] for let in ready}
        pending = [let for let in pending if let not in ready]
    named = {str(s): fixed.get(str(s), s) for s in known}      # max_len: its value if fixed
    sizes = free_sizes(named, plan.used)
    known |= {symbols[name] for name in sizes}
    free: set[str] = set()
    counted = {}
    for key, expr in plan.counts.items():
        missing = free_symbols(expr) - known
        free |= {str(s) for s in missing}
        counted[key] = not missing
    order = {name: index for index, name in enumerate(spec.dims)}
    return sizes, sorted(free, key=order.__getitem__), counted


def _counts(grid: Grid, values: dict, valid: np.ndarray) -> dict:
    """Parameters, FLOPs and activation bytes at the valid combinations (values, and where
    counted); None for a count a dim it needs has no value for."""
    plan = grid.plan
    symbols = plan.variant.spec.symbols()
    at_valid = {symbol: value if np.ndim(value) == 0 else value[valid]
                for symbol, value in values.items()}
    evaluator = Evaluator(at_valid)
    _derive(evaluator, plan.lets, symbols, set(at_valid) | _sized(evaluator, grid.sizes,
                                                                   symbols))
    counts: dict = {}
    for key, expr in plan.counts.items():
        if not grid.counted[key]:
            counts[key] = None
            continue
        value = evaluator.value(expr)
        full = np.zeros(len(valid), dtype=object if value.num.dtype == object else np.int64)
        counted = np.zeros(len(valid), dtype=bool)
        full[valid] = np.broadcast_to(value.num, (int(valid.sum()),))
        counted[valid] = np.broadcast_to(value.whole, (int(valid.sum()),))
        counts[key] = (full, counted)
    return counts
