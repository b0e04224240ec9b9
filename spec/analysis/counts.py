"""What a model costs, symbolic in its dims: parameters, FLOPs and activation memory.

* FLOPs come from the op catalogue (``Op.flops``) applied to every op of every equation. A
  block's costs are worked out once in its own dims and substituted at each call (times N for
  ``repeat(N, ...)``). Matrix products are kept apart from the rest (``kind``), and whatever
  an attention core computes (``spec.attention``) is also summed as the attention part.
* Parameters are the sizes of the ``param`` declarations in force, each counted once where it
  is declared (a tied output projection reads the embedding E and adds nothing).
* Activations are the elements of every tensor a body computes: every equation's output,
  which is what a training step keeps for the backward pass. Inference needs less at a time.

Everything is a sympy expression over the spec's dims (derived dims such as d_k stay as
names); ``evaluate`` gives numbers for a variant. Dims a variant leaves free that the figures
need take the sizes ``free_sizes`` gives (one sequence, as long as the position table allows),
and memory is counted in ``DTYPE``: the docs pages, grids and diffs all give the same figures.
"""

from dataclasses import dataclass, field

import sympy

from tspec.analysis.attention import AttentionCore, attention_core
from tspec.checking.order import topological
from tspec.checking.prove import concrete_values
from tspec.checking.prove import evaluate as prove_evaluate
from tspec.language.model import (
    Block,
    BlockCall,
    Equation,
    Flaw,
    Let,
    OpNode,
    ScalarExpr,
    Spec,
    TensorDecl,
    TensorRef,
    declarations,
    local_binding,
    select,
    under,
)
from tspec.numbers import integer_text
from tspec.ops.base import Unchecked, Value, numel
from tspec.ops.catalogue import OPS
from tspec.symbolic.shape import Shape

ZERO = sympy.Integer(0)
BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}
INT_BYTES, BOOL_BYTES = 8, 1            # int64 token ids, one byte per mask entry
DTYPE = "float32"                       # the float dtype the figures count memory in
# sizes for dims a variant leaves free: one sequence, as long as the position table allows
SEQUENCE_DIMS = ("T", "T_dec")
DEFAULT_LENGTH = 512


@dataclass(frozen=True)
class Flops:
    """FLOPs split by kind: matrix products and the rest; ``attention`` is the part of both
    that attention cores compute (already inside ``matmul`` and ``other``)."""
    matmul: sympy.Basic = ZERO
    other: sympy.Basic = ZERO
    attention: sympy.Basic = ZERO

    @property
    def total(self) -> sympy.Basic:
        return self.matmul + self.other

    def __add__(self, other: "Flops") -> "Flops":
        return Flops(self.matmul + other.matmul, self.other + other.other,
                     self.attention + other.attention)

    @staticmethod
    def sum(parts) -> "Flops":
        """The sum of many, each kind one sympy sum (adding them one by one rebuilds a
        growing sum each time: quadratic in their number)."""
        parts = list(parts)
        return Flops(*(sympy.Add(*(getattr(p, kind) for p in parts))
                       for kind in ("matmul", "other", "attention")))

    def times(self, factor) -> "Flops":
        return Flops(self.matmul * factor, self.other * factor, self.attention * factor)

    def subs(self, mapping: dict) -> "Flops":
        return Flops(*(sympy.sympify(e).xreplace(mapping)
                       for e in (self.matmul, self.other, self.attention)))


@dataclass(frozen=True)
class Activations:
    """Elements of the tensors a body computes, by dtype class."""
    float: sympy.Basic = ZERO
    int: sympy.Basic = ZERO
    bool: sympy.Basic = ZERO

    def __add__(self, other: "Activations") -> "Activations":
        return Activations(self.float + other.float, self.int + other.int,
                           self.bool + other.bool)

    @staticmethod
    def sum(parts) -> "Activations":
        """The sum of many, as ``Flops.sum``."""
        parts = list(parts)
        return Activations(*(sympy.Add(*(getattr(p, kind) for p in parts))
                             for kind in ("float", "int", "bool")))

    def times(self, factor) -> "Activations":
        return Activations(self.float * factor, self.int * factor, self.bool * factor)

    def subs(self, mapping: dict) -> "Activations":
        return Activations(*(sympy.sympify(e).xreplace(mapping)
                             for e in (self.float, self.int, self.bool)))

    def bytes(self, dtype: str) -> sympy.Basic:
        return self.float * BYTES[dtype] + self.int * INT_BYTES + self.bool * BOOL_BYTES


@dataclass(frozen=True)
class Step:
    """One equation or block call of a body, and what it costs there."""
    record: Equation | BlockCall
    output: str
    shape: Shape
    dtype: str
    inputs: tuple[tuple[str, Shape], ...]      # tensors it reads (not parameters)
    params: tuple[tuple[str, Shape], ...]      # parameters an equation reads
    parameters: sympy.Basic                    # their sizes; for a call, the callee's total
    flops: Flops
    activations: Activations
    callee: str | None = None                  # the block a call runs
    binding: dict = field(default_factory=dict)    # the callee's local dims at this call


@dataclass(frozen=True)
class BodyCost:
    """The costs of the model's body (``block`` None) or of one block, in its own dims."""
    name: str
    block: Block | None
    inputs: tuple[TensorDecl, ...]
    steps: tuple[Step, ...]
    own_params: tuple[tuple[str, Shape, sympy.Basic], ...]   # declared here: name, shape, size
    parameters: sympy.Basic                    # own and every callee's
    flops: Flops
    activations: Activations
    attention: AttentionCore | None


def costs(spec: Spec, choices: dict[str, str]) -> dict[str, BodyCost]:
    """Every body the model runs under ``choices`` (all set), the model's first, then blocks
    in the order the model first calls them."""
    return _Costing(spec, choices).run()


class _Costing:
    def __init__(self, spec: Spec, choices: dict[str, str]):
        self.spec = under(spec, choices)     # the blocks and tensors renamed under the choices
        self.choices = choices
        self.done: dict[str, BodyCost] = {}
        self.inferred: dict[tuple, tuple[Value, Flops]] = {}    # see ``term``

    def run(self) -> dict[str, BodyCost]:
        model = self.body(self.spec.name, None)
        ordered = {self.spec.name: model}
        ordered.update({k: v for k, v in self.done.items() if k != self.spec.name})
        return ordered

    def body(self, name: str, block: Block | None) -> BodyCost:
        if name in self.done:
            return self.done[name]
        statements = select(block.body if block else self.spec.body, self.choices)
        decls, inputs = declarations(statements, block)
        values = {d.name: Value(d.shape, d.dtype, tensor=d.name) for d in decls.values()
                  if d.role in ("input", "param", "state")}
        params = {d.name for d in decls.values() if d.role == "param"}
        producers = {s.output: s for s in statements
                     if isinstance(s, (Equation, BlockCall)) or isinstance(s, Flaw) and s.output}
        core = attention_core(block, producers, decls)
        steps = []
        for record in topological(producers, name):
            if isinstance(record, Equation):
                step = self.equation(name, record, decls, values, params, core is not None)
            elif isinstance(record, Flaw):
                step = _flawed(record, decls)
            else:
                step = self.call(record, decls, values)
            values[step.output] = Value(step.shape, step.dtype, tensor=step.output)
            steps.append(step)
        own = tuple((d.name, d.shape, numel(Value(d.shape))) for d in decls.values()
                    if d.role == "param")
        cost = BodyCost(
            name, block, tuple(inputs), tuple(steps), own,
            sympy.Add(*(size for _, _, size in own),
                      *(s.parameters for s in steps if s.callee)),
            Flops.sum(s.flops for s in steps), Activations.sum(s.activations for s in steps),
            core)
        self.done[name] = cost
        return cost

    def equation(self, where, record: Equation, decls, values, params, attention) -> Step:
        flops: list[Flops] = []
        value = self.term(where, record.expr, values, flops)
        declared = decls.get(record.output)
        shape = declared.shape if declared is not None and declared.shape is not None \
            else value.shape
        dtype = declared.dtype if declared is not None else value.dtype
        total = Flops.sum(flops)
        if attention:
            total = Flops(total.matmul, total.other, total.total)
        read = record.inputs
        return Step(
            record, record.output, shape, dtype,
            tuple((n, values[n].shape) for n in read if n not in params),
            tuple((n, values[n].shape) for n in read if n in params),
            sympy.Add(*(numel(values[n]) for n in read if n in params)), total,
            _activations(shape, dtype))

    def term(self, where, term, values, flops: list) -> Value:
        if isinstance(term, TensorRef):
            return values[term.name]
        if isinstance(term, ScalarExpr):
            return Value(Shape(()), "float", scalar=term.expr)
        assert isinstance(term, OpNode)
        args = [self.term(where, a, values, flops) for a in term.args]
        op = OPS[term.op]
        # an op's shape and FLOPs follow from its operands' shapes, dtypes and scalars and its
        # attributes alone: worked out once for each (a chain of like equations, once)
        key = (term.op, tuple((a.shape, a.dtype, a.scalar) for a in args), term.attrs)
        try:
            known = self.inferred.get(key)
        except TypeError:          # an attribute no dict can key: worked out each time
            known, key = None, None
        if known is None:
            out = op.infer(Unchecked(where), args, term.attr)
            count = sympy.sympify(op.flops(args, out, term.attr))
            known = (out, Flops(count, ZERO) if op.kind == "matmul" else Flops(ZERO, count))
            if key is not None:
                self.inferred[key] = known
        flops.append(known[1])
        return known[0]

    def call(self, record: BlockCall, decls, values) -> Step:
        block = self.spec.blocks[record.block]
        callee = self.body(block.name, block)
        binding = local_binding(block, [values[name].shape for name in record.args])
        factor = record.repeat if record.repeat is not None else sympy.Integer(1)
        declared = decls.get(record.output)
        output = next((s for s in callee.steps if s.output == block.output), None)
        shape = declared.shape if declared is not None and declared.shape is not None \
            else output.shape.subs(binding)
        dtype = output.dtype if output is not None else "float"
        return Step(
            record, record.output, shape, dtype,
            tuple((n, values[n].shape) for n in record.inputs), (),
            sympy.sympify(callee.parameters).xreplace(binding) * factor,
            callee.flops.subs(binding).times(factor),
            callee.activations.subs(binding).times(factor), block.name, binding)


def _flawed(record: Flaw, decls: dict) -> Step:
    """A statement that cannot stand under these choices (the checker's finding): its tensor at
    its declared shape, costing nothing, so that what follows can still be counted."""
    declared = decls.get(record.output)
    shape = declared.shape if declared is not None and declared.shape is not None \
        else Shape(())
    dtype = declared.dtype if declared is not None else "float"
    return Step(record, record.output, shape, dtype, (), (), ZERO, Flops(),
                _activations(shape, dtype))


def _activations(shape: Shape, dtype: str) -> Activations:
    size = numel(Value(shape))
    return Activations(**{dtype: size})


def size_text(n: int) -> str:
    """A number of bytes as the docs and errors show it: 1.5 GiB, 640.0 KiB, 12 bytes."""
    for unit, size in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= size:
            try:
                return f"{n / size:,.1f} {unit}"
            except OverflowError:    # past a float's range: whole units
                return f"{integer_text(n // size, grouped=True)} {unit}"
    return f"{integer_text(n, grouped=True)} bytes"


def evaluate(expr, spec: Spec, choices: dict[str, str], dims: dict[str, int]) -> int:
    """A count as a number, for a variant's dim values (derived dims from their definitions);
    a KeyError names a dim with no value."""
    number = prove_evaluate(sympy.sympify(expr), concrete_values(spec, choices, dims))
    return int(number)


def free_sizes(values: dict, used: set[str]) -> dict:
    """Sizes for the dims the figures use (``used``) that have no value in ``values`` (dim
    name -> value: a number, or an array of them for a grid): B = 1, and each sequence length
    max_len where that has a value, else 512."""
    sizes = {}
    if "B" in used and "B" not in values:
        sizes["B"] = 1
    for name in SEQUENCE_DIMS:
        if name in used and name not in values:
            sizes[name] = values.get("max_len", DEFAULT_LENGTH)
    return sizes


def used_dims(spec, choices, bodies: dict[str, BodyCost]) -> set[str]:
    """The dims some shape or count of the model's ``bodies`` uses, with what the derived
    ones among them are defined from."""
    found: set[str] = set()
    for body in bodies.values():
        for step in body.steps:
            for shape in [step.shape] + [s for _, s in step.inputs + step.params]:
                if shape is not None:          # an unstated shape nothing determines
                    found |= _names(shape.free_symbols())
            found |= _names(sympy.sympify(step.flops.total).free_symbols)
            if step.callee and step.record.repeat is not None:
                found |= _names(sympy.sympify(step.record.repeat).free_symbols)
            if isinstance(step.record, Equation):     # a dim an op reads (a mask's window W)
                found |= _term_dims(step.record.expr)
        for _, shape, _ in body.own_params:
            if shape is not None:
                found |= _names(shape.free_symbols())
    for statement in select(spec.body, choices):
        if isinstance(statement, Let) and statement.dim in found:
            found |= _names(statement.expr.free_symbols)
    return found


def _names(symbols) -> set[str]:
    """The names of some symbols, as ``str`` gives them (a plain symbol's name at once: sympy's
    printer takes microseconds a symbol, which a spec of 20,000 tensors asks 100,000 times)."""
    return {s.name if type(s) is sympy.Symbol else str(s) for s in symbols}


def _term_dims(term) -> set[str]:
    """The dims an equation's op tree names as values (``sliding_window_mask(T, T, W)``,
    ``rotary(X, T_past)``, a slice's bounds), whatever its shapes and FLOPs say."""
    if isinstance(term, ScalarExpr):
        return _names(sympy.sympify(term.expr).free_symbols)
    if not isinstance(term, OpNode):
        return set()
    found = set().union(*(_term_dims(a) for a in term.args))
    for value in term.attr.values():
        if isinstance(value, sympy.Basic):
            found |= _names(value.free_symbols)
    return found


def call_paths(bodies: dict[str, BodyCost], root: str) -> dict[str, list]:
    """For each block: every (path, binding to the model's dims, copies) it is called at."""
    found: dict[str, list] = {}

    def walk(name, path, binding, copies):
        for step in bodies[name].steps:
            if not step.callee:
                continue
            inner = {k: sympy.sympify(v).xreplace(binding) for k, v in step.binding.items()}
            times = copies * (step.record.repeat if step.record.repeat is not None else 1)
            where = path + [step.record.instance]
            found.setdefault(step.callee, []).append((".".join(where), inner, times))
            walk(step.callee, where, inner, times)
    walk(root, [], {}, sympy.Integer(1))
    return found
