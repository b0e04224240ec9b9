"""Diffs: what changes from one variant to another, block by block.

    tspec diff gpt2_small gpt2_medium

Each side is profiled as its docs page is made: the choices in force, every dim with a value
(derived ones included), every run-time setting of the catalogue (``spec.ops.SETTINGS``: eps,
rope theta, ...) at the variant's value or else the catalogue's default, each tensor's symbolic and concrete shape (``tspec shapes``), and for
the model and every block it runs the parameters, forward FLOPs and activation memory from
``spec.counts`` at the sizes the docs pages give free dims (``free_sizes``). A block's figures
are one copy's, at the sizes of its first call (as the docs pages give them), with how many
copies the model runs. Blocks that only one side runs are listed as added or removed.
"""

from dataclasses import dataclass, field

import sympy

from tspec.analysis.counts import DTYPE, call_paths, costs, free_sizes, used_dims
from tspec.checking import limits
from tspec.checking.check import check as check_spec
from tspec.checking.findings import display_path
from tspec.checking.prove import concrete_values, evaluate
from tspec.checking.report import require_none, require_proved, sizes_text
from tspec.language.model import choices_in_force
from tspec.language.uses import settings_read
from tspec.language.variant import Variant
from tspec.numbers import integer_text
from tspec.ops.catalogue import SETTINGS

FIGURES = ("parameters", "flops", "activation_bytes")
LABELS = {"parameters": "parameters", "flops": "FLOPs", "activation_bytes": "activation bytes",
          "copies": "copies"}


@dataclass(frozen=True)
class Figures:
    """What one body costs: one copy, at its first call; and how many copies run."""
    parameters: int | None       # None: a dim it needs has no value
    flops: int | None
    activation_bytes: int | None
    copies: int | None

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class TensorShape:
    """A tensor of the resolved model: where it is (the call path), its shapes."""
    instance: str                # "encoder.layers[i].self_attention"; "" for the model's own
    tensor: str
    symbolic: str
    concrete: str

    def text(self, both: bool) -> str:
        return f"{self.symbolic} = {self.concrete}" if both and \
            self.symbolic != self.concrete else self.concrete


@dataclass
class Profile:
    """One side of a diff."""
    variant: Variant
    choices: dict[str, str]              # in force
    dims: dict[str, int]                 # every dim with a value, derived ones included
    settings: dict[str, object]          # every setting: the variant's, else the default
    sizes: dict[str, int]                # what the counts give free dims
    bodies: dict[str, Figures]           # the model's first, then blocks as it calls them
    shapes: dict[tuple[str, str], TensorShape]  # (instance, tensor) -> shape
    blocks: dict[str, str]               # instance path -> the block it runs


def profile(variant: Variant, rows: list) -> Profile:
    """A variant's profile; ``rows``: its tensors (``spec.api.shapes``). A variant whose sizes
    break the spec is refused, as ``tspec docs`` refuses it."""
    spec = variant.spec
    # as `tspec check` checks it, then at the sizes the counts give the dims it leaves free
    require_proved(variant, "nothing compared", exit_status=2)
    limits.doing(f"counting {variant.name}'s parameters, FLOPs and memory")
    choices = spec.choice_values(variant.choices)
    bodies = costs(spec, choices)
    known = concrete_values(spec, choices, variant.dims)
    sizes = free_sizes({str(k): int(v) for k, v in known.items()},
                       used_dims(spec, choices, bodies))
    result = check_spec(spec, choices, {**variant.dims, **sizes})
    require_none(result.findings, f"in {variant.name} at the sizes it is counted at "
                 f"({sizes_text(sizes)})", "nothing compared", exit_status=2)
    limits.doing(f"counting {variant.name}'s parameters, FLOPs and memory")
    values = concrete_values(spec, choices, {**variant.dims, **sizes})
    paths = call_paths(bodies, spec.name)
    figures = {}
    for name, body in bodies.items():
        calls = paths.get(name, [])
        binding = calls[0][1] if calls else {}
        copies = sum((times for _, _, times in calls), sympy.Integer(0)) if calls else 1
        figures[name] = Figures(*(_number(expr, binding, values) for expr in (
            body.parameters, body.flops.total, body.activations.bytes(DTYPE))),
            _number(copies, {}, values))
    blocks = {path: name for name, calls in paths.items() for path, _, _ in calls}
    shapes = {}
    for row in rows:
        instance, _, tensor = row.name.rpartition(".")
        shapes[instance, tensor] = TensorShape(instance, tensor, row.symbolic, row.concrete)
    dims = {str(k): int(v) for k, v in known.items() if v.denominator == 1}
    order = {name: index for index, name in enumerate(spec.dims)}
    return Profile(variant, choices_in_force(spec, choices),
                   dict(sorted(dims.items(), key=lambda kv: order[kv[0]])),
                   settings_in_force(variant), sizes, figures, shapes, blocks)


def settings_in_force(variant: Variant) -> dict[str, object]:
    """Every setting of the catalogue (in its order) that an op the variant's choices apply
    reads, at the variant's value, or else at the catalogue's default, the value its
    generated code takes when none is given (a GPT-2 has no rotary base to compare): a
    setting added to the catalogue is compared with no change here."""
    spec = variant.spec
    read = settings_read(spec, spec.choice_values(variant.choices))
    return {name: variant.settings[name] if name in variant.settings
            else _default(SETTINGS[name].default)
            for name in _union(list(SETTINGS), list(variant.settings)) if name in read}


def _default(text: str) -> object:
    """A setting's default as generated code writes it (``1e-5``), as a number where it is
    one (as a variant's value is), else as written."""
    try:
        return float(text)
    except ValueError:
        return text


def _number(expr, binding: dict, values: dict) -> int | None:
    expr = sympy.Integer(expr) if isinstance(expr, int) else expr
    try:
        return int(evaluate(expr.xreplace(binding), values))
    except KeyError:          # a dim with no value
        return None


# ---------------------------------------------------------------------------------------------
# The diff

@dataclass(frozen=True)
class Change:
    """One thing that differs: its value on each side (None: absent there, or not counted)."""
    name: str
    a: object
    b: object

    def as_dict(self) -> dict:
        return {"name": self.name, "a": self.a, "b": self.b}


@dataclass(frozen=True)
class BlockChange:
    """A body whose figures differ, or that one side alone runs."""
    name: str
    status: str                  # "changed", "added" (only in B), "removed" (only in A)
    a: Figures | None
    b: Figures | None

    def changes(self) -> list[Change]:
        a, b = self.a.as_dict() if self.a else {}, self.b.as_dict() if self.b else {}
        return [Change(key, a.get(key), b.get(key)) for key in (*FIGURES, "copies")
                if a.get(key) != b.get(key)]

    def as_dict(self) -> dict:
        return {"name": self.name, "status": self.status,
                "a": self.a.as_dict() if self.a else None,
                "b": self.b.as_dict() if self.b else None,
                "changed": [c.name for c in self.changes()]}


@dataclass
class Diff:
    """What changes from profile ``a`` to profile ``b``."""
    a: Profile
    b: Profile
    choices: list[Change] = field(default_factory=list)
    dims: list[Change] = field(default_factory=list)
    settings: list[Change] = field(default_factory=list)
    sizes: list[Change] = field(default_factory=list)
    totals: list[Change] = field(default_factory=list)     # the model's figures, always
    blocks: list[BlockChange] = field(default_factory=list)
    shapes: list[tuple[TensorShape | None, TensorShape | None]] = field(default_factory=list)

    @property
    def same(self) -> bool:
        return not (self.choices or self.dims or self.settings or self.sizes or self.blocks
                    or self.shapes or any(c.a != c.b for c in self.totals))

    def summary(self) -> str:
        a, b = self.a.variant.name, self.b.variant.name
        if self.same:
            return f"{a} and {b} are the same model at the same sizes"
        parts = [(len(self.choices), "choice"), (len(self.dims), "dim"),
                 (len(self.settings), "setting"), (len(self.sizes), "counted size"),
                 (len(self.blocks), "block"), (len(self.shapes), "tensor shape")]
        return f"{a} -> {b}: " + ", ".join(f"{n} {what}{'s' if n != 1 else ''}"
                                           for n, what in parts if n) + " differ"

    def text(self) -> str:
        a, b = self.a, self.b
        lines = [f"== {_describe(a.variant)} -> {_describe(b.variant)}"]
        sizes = [", ".join(f"{k}={v}" for k, v in p.sizes.items()) for p in (a, b)]
        counted = sizes[0] if sizes[0] == sizes[1] else \
            f"{sizes[0] or 'nothing'} ({a.variant.name}); {sizes[1] or 'nothing'} " \
            f"({b.variant.name})"
        lines.append(f"   counted at {counted + '; ' if counted else ''}activation memory in "
                     f"{DTYPE}")
        for title, changes in (("choices", self.choices), ("dims", self.dims)):
            lines += ["", f"{title}:" + ("" if changes else " the same")]
            lines += _aligned([(c.name, _shown(c.a), _shown(c.b), "") for c in changes])
        lines += ["", "settings:" + ("" if self.settings else " the same")]
        lines += _aligned([(c.name, _setting(c.a, c.name, a), _setting(c.b, c.name, b), "")
                           for c in self.settings])
        lines += ["", "totals:"]
        lines += _aligned([(LABELS[c.name], _shown(c.a), _shown(c.b), _change(c.a, c.b))
                           for c in self.totals])
        lines += ["", "blocks:" + ("" if self.blocks else " the same")]
        for block in self.blocks:
            status = {"added": f" (only in {b.variant.name})",
                      "removed": f" (only in {a.variant.name})"}.get(block.status, "")
            lines.append(f"  {block.name}{status}")
            lines += _aligned([(LABELS[c.name], _shown(c.a), _shown(c.b), _change(c.a, c.b))
                               for c in block.changes()], indent="    ")
        lines += ["", "shapes:" + ("" if self.shapes else " the same")]
        instance = None
        for old, new in self.shapes:
            shape = old or new
            if shape.instance != instance:
                instance = shape.instance
                block = (a.blocks if old else b.blocks).get(instance.replace("[i]", ""))
                lines.append(f"  {instance or 'the model'}" + (f" ({block})" if block else ""))
            both = old is None or new is None or old.symbolic != new.symbolic
            lines.append(f"    {shape.tensor}: {old.text(both) if old else '—'} -> "
                         f"{new.text(both) if new else '—'}")
        lines += ["", self.summary()]
        return "\n".join(lines) + "\n"

    def as_dict(self) -> dict:
        def side(p: Profile) -> dict:
            return {"target": p.variant.name,
                    "file": display_path(p.variant.file) if p.variant.file else None,
                    "choices": p.choices, "dims": p.dims, "settings": p.settings,
                    "sizes": p.sizes}

        def shape(s: TensorShape | None) -> dict | None:
            return None if s is None else {"symbolic": s.symbolic, "concrete": s.concrete}

        return {
            "a": side(self.a), "b": side(self.b), "same": self.same, "dtype": DTYPE,
            "choices": [c.as_dict() for c in self.choices],
            "dims": [c.as_dict() for c in self.dims],
            "settings": [c.as_dict() for c in self.settings],
            "sizes": [c.as_dict() for c in self.sizes],
            "totals": [c.as_dict() for c in self.totals],
            "blocks": [b.as_dict() for b in self.blocks],
            "shapes": [{"instance": (old or new).instance, "tensor": (old or new).tensor,
                        "a": shape(old), "b": shape(new)} for old, new in self.shapes],
        }


def compare(a: Profile, b: Profile) -> Diff:
    """Every difference between two profiles, in the spec's order (b's additions last);
    shapes grouped by the call path they are at."""
    limits.doing(f"comparing {a.variant.name} with {b.variant.name}")
    diff = Diff(a, b)
    diff.choices = _changes(a.choices, b.choices)
    diff.dims = _changes(a.dims, b.dims)
    diff.settings = _changes(a.settings, b.settings)
    diff.sizes = _changes(a.sizes, b.sizes)
    model_a, model_b = next(iter(a.bodies)), next(iter(b.bodies))
    diff.totals = [Change(key, getattr(a.bodies[model_a], key), getattr(b.bodies[model_b], key))
                   for key in FIGURES]
    for name in _union(list(a.bodies)[1:], list(b.bodies)[1:]):
        old, new = a.bodies.get(name), b.bodies.get(name)
        if old != new:
            status = "added" if old is None else "removed" if new is None else "changed"
            diff.blocks.append(BlockChange(name, status, old, new))
    keys = _union(list(a.shapes), list(b.shapes))
    instances = {instance: i for i, (instance, _) in reversed(list(enumerate(keys)))}
    for key in sorted(keys, key=lambda key: instances[key[0]]):      # stable: tensor order
        old, new = a.shapes.get(key), b.shapes.get(key)
        if old is None or new is None or (old.symbolic, old.concrete) != \
                (new.symbolic, new.concrete):
            diff.shapes.append((old, new))
    return diff


def _union(first: list, second: list) -> list:
    """The items of ``first``, then those of ``second`` that ``first`` lacks, in order."""
    seen = set(first)
    return first + [item for item in second if item not in seen]


def _changes(a: dict, b: dict) -> list[Change]:
    return [Change(name, a.get(name), b.get(name)) for name in _union(list(a), list(b))
            if a.get(name) != b.get(name)]


def _aligned(rows: list[tuple[str, str, str, str]], indent: str = "  ") -> list[str]:
    if not rows:
        return []
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return [f"{indent}{name.ljust(widths[0])}  {a.rjust(widths[1])} -> {b.rjust(widths[2])}"
            + (f"  {change}" if change else "") for name, a, b, change in rows]


def _shown(value) -> str:
    if value is None:
        return "—"
    return integer_text(value, grouped=True) if isinstance(value, int) else str(value)


def _setting(value, name: str, side: Profile) -> str:
    """A setting's value as the diff shows it, ``(default)`` after one the variant leaves at
    the catalogue's; ``—`` where no op of the side reads it."""
    return _shown(value) + ("" if value is None or name in side.variant.settings
                            else " (default)")


def _change(a, b) -> str:
    """``+3,145,728 (+300.0%)``: the difference, and relative to ``a``, where both sides are
    counted."""
    if not isinstance(a, int) or not isinstance(b, int) or a == b:
        return ""
    return f"{'+' if b > a else '-'}{integer_text(abs(b - a), grouped=True)}" + (
        f" ({relative(a, b)})" if a else "")


def relative(a: int, b: int) -> str:
    """``+300.0%``: how much ``b`` is more than ``a`` (not 0)."""
    try:
        return f"{(b - a) / a:+.1%}"
    except OverflowError:            # past a float's range: in whole percent
        return f"{'+' if b > a else '-'}{integer_text(abs(b - a) * 100 // abs(a), True)}%"


def _describe(variant: Variant) -> str:
    return f"{variant.name} ({display_path(variant.file)})" if variant.file else variant.name
