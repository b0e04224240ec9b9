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
import math
import numbers
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from spec.check import Result
from spec.check import check as check_spec
from spec.counts import DTYPE, costs, free_sizes, used_dims
from spec.errors import GridError
from spec.evaluate import Evaluator, Exact, as_integers, free_symbols
from spec.findings import display_path, format_value
from spec.model import Constraint, Let, choices_in_force, select
from spec.numbers import integer_text
from spec.variant import MAX_DIGITS, Variant, dim_value, shown, unknown_dim

MAX_COMBINATIONS = 1_000_000
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

    def array(self) -> np.ndarray:
        values = self.values
        if isinstance(values, range) and max(values[0], values[-1]) < 2 ** 62:
            return np.arange(values.start, values.stop, values.step, dtype=np.int64)
        return as_integers(list(values))


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
class Grid:
    """Every combination of the axes' values, judged against one proof."""
    variant: Variant
    axes: list[Axis]
    choices: dict[str, str]           # the choices in force
    fixed: dict[str, int]             # the dim values every combination shares
    sizes: dict[str, object]          # sizes the counts give free dims (B = 1, T = max_len)
    free: list[str]                   # dims the counts need that have no value
    proof: Result
    columns: dict[str, np.ndarray]    # each axis's value at each combination
    valid: np.ndarray                 # bool per combination
    reasons: list[Break]
    broken: np.ndarray                # bool (reason, combination)
    derived: dict[str, Exact]         # derived dims at each combination
    counts: dict[str, tuple[np.ndarray, np.ndarray] | None]   # values, and where counted

    @property
    def proved(self) -> bool:
        return self.proof.ok

    def __len__(self) -> int:
        return len(self.valid)

    @property
    def valid_count(self) -> int:
        return int(np.count_nonzero(self.valid))

    @property
    def invalid_count(self) -> int:
        return len(self) - self.valid_count

    def summary(self) -> str:
        return f"{len(self):,} combinations: {self.valid_count:,} valid, " \
               f"{self.invalid_count:,} invalid"

    def points(self, only: str | None = None) -> Iterator[Point]:
        """The combinations in order (the first axis slowest); ``only`` "valid" or "invalid"
        keeps those."""
        if only not in (None,) + ONLY:
            raise GridError(f"only: {only!r} is neither 'valid' nor 'invalid'")
        count = len(self)
        indices = range(count) if only is None else \
            np.flatnonzero(self.valid if only == "valid" else ~self.valid).tolist()
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
                tuple(reason for reason, hit in zip(self.reasons, broken[i]) if hit))

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
            missing = [LABELS[key] for key in COUNTS if self.counts[key] is None]
            lines.append(f"   no value for {', '.join(self.free)}: {', '.join(missing)} "
                         "not counted (--set or --grid one)")
        return lines

    def text(self, only: str | None = None) -> str:
        """The header, a table of the combinations, and the summary line."""
        headers = [axis.name for axis in self.axes] + ["valid", *LABELS.values(), "breaks"]
        rows = []
        for point in self.points(only):
            figures = [point.parameters, point.flops, point.activation_bytes]
            rows.append([str(point.dims[axis.name]) for axis in self.axes]
                        + ["yes" if point.valid else "no"]
                        + ["—" if f is None else integer_text(f, grouped=True)
                           for f in figures]
                        + ["; ".join(b.text() for b in point.breaks)])
        right = len(self.axes) + 4           # numbers right-aligned, valid and breaks left
        widths = [max([len(h)] + [len(row[i]) for row in rows]) for i, h in enumerate(headers)]

        def line(cells):
            return "  ".join(c.rjust(w) if i < right and i != len(self.axes) else c.ljust(w)
                             for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
        lines = self.header() + ["", line(headers), line(["-" * w for w in widths])]
        lines += [line(row) for row in rows]
        shown = "" if only is None else f" (shown: the {only} ones)"
        lines += ["", self.summary() + shown]
        return "\n".join(lines) + "\n"

    def as_dict(self, only: str | None = None) -> dict:
        variant = self.variant
        return {
            "target": variant.name,
            "file": display_path(variant.file) if variant.file else None,
            "choices": self.choices,
            "fixed": self.fixed,
            "sizes": {k: v if isinstance(v, int) else str(v) for k, v in self.sizes.items()},
            "dtype": DTYPE,
            "axes": {axis.name: list(axis.values) for axis in self.axes},
            "combinations": len(self),
            "valid": self.valid_count,
            "invalid": self.invalid_count,
            "points": [point.as_dict() for point in self.points(only)],
        }

    def csv(self, only: str | None = None) -> str:
        """One row per combination: the axes, valid (true/false), the counts (empty where
        not counted), and what it breaks."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow([axis.name for axis in self.axes] + ["valid", *COUNTS, "breaks"])
        for point in self.points(only):
            figures = [point.parameters, point.flops, point.activation_bytes]
            writer.writerow([point.dims[axis.name] for axis in self.axes]
                            + ["true" if point.valid else "false"]
                            + ["" if f is None else integer_text(f) for f in figures]
                            + ["; ".join(b.text() for b in point.breaks)])
        return out.getvalue()


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
    proof: Result
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
    proof = check_spec(spec, choices)
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
    """Prove once, then judge and count every combination of the axes' values."""
    return judge(plan(variant, axes, settings), axes)


def judge(plan: Plan, axes: list[Axis]) -> Grid:
    """Every combination of the axes' values, judged and counted at once (nothing when the
    proof failed: no combination can be judged against it)."""
    variant, lets, constraints = plan.variant, plan.lets, plan.constraints
    spec = variant.spec
    symbols = spec.symbols()
    grid_names = {axis.name for axis in axes}
    fixed = {name: dim.value for name, dim in spec.dims.items() if dim.value is not None}
    fixed |= {name: value for name, value in variant.dims.items() if name not in grid_names}
    columns = _combinations(axes) if plan.proof.ok else \
        {axis.name: as_integers([]) for axis in axes}
    count = len(next(iter(columns.values())))
    reasons = [Break("constraint-violated", f"require {c.text}", c.file, c.line)
               for c in constraints] + [Break("not-integral", f"let {let.dim} = {let.text}",
                                              let.file, let.line) for let in lets]
    grid = Grid(variant, axes, choices_in_force(spec, plan.choices), fixed, {}, [], plan.proof,
                columns, np.zeros(count, dtype=bool), reasons,
                np.zeros((len(reasons), count), dtype=bool), {}, dict.fromkeys(COUNTS))
    if not plan.proof.ok:
        return grid
    values = {symbols[name]: value for name, value in {**fixed, **columns}.items()}
    evaluator = Evaluator(values)
    derived = _derive(evaluator, lets, symbols, set(values))
    grid.derived = {let.dim: derived[symbols[let.dim]] for let in lets
                    if symbols[let.dim] in derived}
    grid.broken = _broken(evaluator, constraints, lets, derived, symbols, set(values), count)
    grid.valid = ~grid.broken.any(axis=0) if len(reasons) else np.ones(count, dtype=bool)
    grid.sizes, grid.free, grid.counts = _counts(plan, values, fixed, grid.valid)
    return grid


def _combinations(axes: list[Axis]) -> dict[str, np.ndarray]:
    """Each axis's value at every combination, the first axis varying slowest."""
    arrays = [axis.array() for axis in axes]
    if any(a.dtype == object for a in arrays):
        arrays = [a.astype(object) for a in arrays]
    mesh = np.meshgrid(*arrays, indexing="ij")
    return {axis.name: m.reshape(-1) for axis, m in zip(axes, mesh)}


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


def _counts(plan: Plan, values: dict, fixed: dict, valid: np.ndarray):
    """The sizes free dims take, the dims the counts need that have none, and parameters,
    FLOPs and activation bytes at the valid combinations (values, and where counted)."""
    spec = plan.variant.spec
    symbols = spec.symbols()
    at_valid = {symbol: value if np.ndim(value) == 0 else value[valid]
                for symbol, value in values.items()}
    evaluator = Evaluator(at_valid)
    known = set(at_valid) | set(_derive(evaluator, plan.lets, symbols, set(at_valid)))
    named = {str(s): fixed.get(str(s), s) for s in known}      # max_len: its value if fixed
    sizes = free_sizes(named, plan.used)
    for name, size in sizes.items():
        evaluator.memo[symbols[name]] = evaluator.value(size)
        known.add(symbols[name])
    counts: dict = {}
    free: set[str] = set()
    for key, expr in plan.counts.items():
        missing = free_symbols(expr) - known
        if missing:
            free |= {str(s) for s in missing}
            counts[key] = None
            continue
        value = evaluator.value(expr)
        full = np.zeros(len(valid), dtype=object if value.num.dtype == object else np.int64)
        counted = np.zeros(len(valid), dtype=bool)
        full[valid] = np.broadcast_to(value.num, (int(valid.sum()),))
        counted[valid] = np.broadcast_to(value.whole, (int(valid.sum()),))
        counts[key] = (full, counted)
    order = list(spec.dims)
    return sizes, sorted(free, key=order.index), counts
