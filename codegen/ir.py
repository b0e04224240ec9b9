"""The intermediate representation code generation renders: typed records, no Python text.

Lowering (``codegen.lowering``) turns a proved spec under one choice of options into a
``Module``: parameter containers and one ``Function`` per block plus one for the model. A
function's body is a tuple of step records (``Assign``, ``CallBlock``, ``StackLoop``,
``AttentionCore`` ...) whose values are expression records (``Name``, ``Call``, ``BinOp`` ...)
and whose shapes are the spec's ``Shape``s. The passes (``codegen.passes``) rewrite these
records; the renderer (``codegen.rendering``) prints them, one template macro per step kind,
breaking lines in one place. Names here are identifiers (``require_identifier``); every other
string is prose for a comment or docstring, or a jaxtyping axis string.
"""

import functools
import re
from dataclasses import dataclass, field, fields, is_dataclass
from types import EllipsisType
from typing import ClassVar

import sympy

from tspec.analysis.counts import Activations
from tspec.errors import CodegenError
from tspec.symbolic.shape import Shape

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def require_identifier(name: str, what: str) -> None:
    """A name the IR places in code: an identifier, or a CodegenError."""
    if not isinstance(name, str) or not IDENTIFIER.match(name):
        raise CodegenError(f"internal error: {what} {name!r} is not a Python identifier; "
                           "please report it")


class Named:
    """A record whose fields ``identifiers`` (each a str, a tuple of them, or None) are placed in
    code as names: each checked to be an identifier when the record is made."""
    identifiers: ClassVar = ()

    def __post_init__(self):
        for field_name in self.identifiers:
            value = getattr(self, field_name)
            for name in value if isinstance(value, tuple) else (value,):
                if name is not None:
                    require_identifier(name, f"{type(self).__name__}.{field_name}")


# ---------------------------------------------------------------------------------------------
# Expressions

class Expr(Named):
    """An expression of generated code."""


@dataclass(frozen=True)
class Name(Expr):
    """A local name: an argument, a computed tensor, a dim, ``params``, ``trace``."""
    id: str
    identifiers: ClassVar = ("id",)


@dataclass(frozen=True)
class Runtime(Expr):
    """A helper of the backend's runtime module: ``rt.<name>``."""
    name: str
    identifiers: ClassVar = ("name",)


@dataclass(frozen=True)
class ArrayModule(Expr):
    """A function or attribute of the backend's array module: ``np.<name>``."""
    name: str
    identifiers: ClassVar = ("name",)


@dataclass(frozen=True)
class Dim(Expr):
    """An integer expression over dims (``T_dec``, ``d_model // H``)."""
    expr: sympy.Basic


@dataclass(frozen=True)
class Scalar(Expr):
    """A number over dims (``math.sqrt(d_k)``)."""
    expr: sympy.Basic


@dataclass(frozen=True)
class Literal(Expr):
    """A constant: a number, a string (double-quoted, or repr's quotes), None, or ``...``."""
    value: int | float | str | None | EllipsisType
    repr_quotes: bool = False


@dataclass(frozen=True)
class Number(Expr):
    """A number as a setting's default spells it (``1e-5``)."""
    spelling: str

    def __post_init__(self):
        if not re.fullmatch(r"-?[0-9]+(\.[0-9]*)?(e[-+]?[0-9]+)?", self.spelling):
            raise CodegenError(f"internal error: {self.spelling!r} is not a number")


@dataclass(frozen=True)
class Slice(Expr):
    """``:`` in a subscript: every entry of an axis."""


@dataclass(frozen=True)
class Keyword(Named):
    name: str
    value: Expr
    identifiers: ClassVar = ("name",)


@dataclass(frozen=True)
class Call(Expr):
    function: Expr
    args: tuple[Expr, ...] = ()
    keywords: tuple[Keyword, ...] = ()


# Python operator precedences, for parentheses (the renderer's printer places them)
ATOM, POWER, UNARY, PRODUCT, SUM, LAMBDA = 100, 90, 80, 70, 60, 0
OPERATORS = {"+": SUM, "-": SUM, "*": PRODUCT, "/": PRODUCT, "//": PRODUCT, "@": PRODUCT,
             "**": POWER}


@dataclass(frozen=True)
class BinOp(Expr):
    op: str                    # one of OPERATORS
    left: Expr
    right: Expr

    def __post_init__(self):
        if self.op not in OPERATORS:
            raise CodegenError(f"internal error: unknown operator {self.op!r}; please report it")


@dataclass(frozen=True)
class Neg(Expr):
    operand: Expr


@dataclass(frozen=True)
class Subscript(Expr):
    value: Expr
    index: tuple[Expr, ...]


@dataclass(frozen=True)
class Attribute(Expr):
    value: Expr
    name: str
    identifiers: ClassVar = ("name",)


@dataclass(frozen=True)
class List(Expr):
    items: tuple[Expr, ...]


@dataclass(frozen=True)
class Lambda(Expr):
    """``lambda S, rows, keys: body``: a function the runtime calls (an attention core's score
    chain, applied to each block of scores)."""
    parameters: tuple[str, ...]
    body: Expr

    def __post_init__(self):
        for name in self.parameters:
            require_identifier(name, "a lambda's parameter")


@dataclass(frozen=True)
class Tensor(Expr):
    """A tensor the spec names (an argument, parameter, state or computed value): how code
    reaches it, with its shape and dtype, which the passes read; printed as ``ref``."""
    ref: Expr
    shape: Shape
    dtype: str


def precedence(expr: Expr) -> int:
    """The precedence of an expression's outermost operator (ATOM for names and calls)."""
    if isinstance(expr, Tensor):
        return precedence(expr.ref)
    if isinstance(expr, BinOp):
        return OPERATORS[expr.op]
    if isinstance(expr, Neg):
        return UNARY
    if isinstance(expr, Lambda):
        return LAMBDA
    return ATOM


def call(function: Expr, *args: Expr, **keywords: Expr) -> Call:
    return Call(function, args, tuple(Keyword(k, v) for k, v in keywords.items()))


def text(value: str) -> Literal:
    return Literal(value)


def item(value: Expr, key: str | int) -> Subscript:
    """``value["key"]``: an entry of params or a cache."""
    return Subscript(value, (Literal(key),))


def unwrap(expr: Expr) -> Expr:
    """The expression without its Tensor record."""
    return unwrap(expr.ref) if isinstance(expr, Tensor) else expr


# ---------------------------------------------------------------------------------------------
# Types of arguments, fields and results

@dataclass(frozen=True)
class ArrayType:
    """jaxtyping's annotation: ``Float[np.ndarray, "B T d_model"]``."""
    kind: str                  # Float, Int or Bool
    axes: str                  # jaxtyping's axis string, "#H B T d_k"

    def __post_init__(self):
        if self.kind not in ("Float", "Int", "Bool"):
            raise CodegenError(f"internal error: unknown array kind {self.kind!r}")


@dataclass(frozen=True)
class PlainType(Named):
    """A Python type by name: int, float, dict, list of a params class; or the dtype's."""
    name: str                  # int, float, dict, dtype (type | np.dtype)
    of: str | None = None      # list[of]
    identifiers: ClassVar = ("name", "of")


Type = ArrayType | PlainType


# ---------------------------------------------------------------------------------------------
# Steps

@dataclass(frozen=True)
class Comment:
    """A line's comment: its shape (the spec's), between two bits of prose."""
    shape: Shape | None = None
    before: str = ""
    after: str = ""


@dataclass(frozen=True)
class Step(Named):
    """One statement of a function body."""


@dataclass(frozen=True)
class Assign(Step):
    """``targets = value  # comment``."""
    targets: tuple[Expr, ...]
    value: Expr
    comment: Comment = Comment()


@dataclass(frozen=True)
class Evaluate(Step):
    """A call for its effect (a check): ``rt.require_size(...)``."""
    value: Expr
    comment: Comment = Comment()


@dataclass(frozen=True)
class KeepMasked(Step):
    """float16: a score past its range is +inf, and +inf + (-inf) at a masked key NaN; such
    entries are set back to -inf: ``rt.keep_masked(S, L)``."""
    helper: ClassVar = "keep_masked"           # the runtime function it calls
    scores: Expr
    mask: Expr


@dataclass(frozen=True)
class CallBlock(Step):
    """``targets = block_function(args, keywords)``: a call of a block's function."""
    targets: tuple[str, ...]
    function: str
    args: tuple[Expr, ...]
    keywords: tuple[Keyword, ...]
    comment: Comment = Comment()
    identifiers: ClassVar = ("targets", "function")


@dataclass(frozen=True)
class EachMember(Step):
    """A block of single tensors applied to each member of a family: ``target =
    xp.stack([call for member in range(len(family))])``."""
    target: str
    family: Expr
    call: CallBlock            # its target unused: the stack's item
    shape: Shape
    identifiers: ClassVar = ("target",)


@dataclass(frozen=True)
class StackLoop(Step):
    """A stack of layers: ``target = start``, then the call once per layer."""
    target: str
    start: Expr
    shape: Shape
    instance: str              # the stack's entry in params
    layers: Expr | None        # how many, where the layers have no parameters
    call: CallBlock
    identifiers: ClassVar = ("target", "instance")


@dataclass(frozen=True)
class CacheUpdate(Step):
    """``cache["S"] = value``: a state's value for the next call."""
    state: str
    value: str
    shape: Shape
    identifiers: ClassVar = ("state", "value")


@dataclass(frozen=True)
class AttentionForm:
    """An attention core's scores as q @ k.T + L, q over the query rows and k over the keys,
    or as f(q @ k.T) + L (``scores``, f as a function of a block's product, rows and keys):
    the arguments a strategy computes the three equations from."""
    q: Expr
    k: Expr
    values: Expr
    mask: Expr
    side_by_side: bool         # the output is a family (heads stored side by side)
    shape: Shape               # the output's
    scores: Lambda | None = None
    chain: tuple[str, ...] = ()    # the chain's ops (for a note where none applies it)
    scores_shape: Shape | None = None   # the whole scores' (for that note)


@dataclass(frozen=True)
class AttentionStrategy:
    """How the backend computes an attention core at once where no trace is asked for: a call
    of a runtime helper (``rt.attend_in_blocks(q, k, V, L)``) whose value is returned."""
    note: str
    call: Call
    shape: Shape


@dataclass(frozen=True)
class AttentionCore(Step):
    """Attention's three equations, S = X + L, A = softmax(S), O = A @ V (their steps, by
    target), the form of its scores where a strategy can compute them (None: as written), and
    the strategy a pass chose (``codegen.passes.attention``)."""
    scores: str
    weights: str
    output: str
    mask: Expr
    steps: tuple[Step, ...]
    form: AttentionForm | None = None
    strategy: AttentionStrategy | None = None
    unblocked: str = ""        # why no strategy computes it where it has a form (a note)
    identifiers: ClassVar = ("scores", "weights", "output")


@dataclass(frozen=True)
class Fused(Step):
    """Steps a backend computes another way where no trace is asked for: ``if trace is None:``
    the ``fused`` steps, else the ``steps`` as written (``codegen.passes.residual``: a residual
    sum and the norm that reads it in one kernel). Both assign the same names."""
    note: str
    fused: tuple[Step, ...]
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class Footprint:
    """What a function's tensors take at once: the elements of its own and of the largest of
    its calls' (each call's own and its largest call's, down the tree), by dtype class
    (``spec.analysis.counts.Activations``), and the bytes of an element of each class."""
    own: Activations
    largest: tuple[Activations, ...]   # each call's: the largest may be any
    itemsize: Expr                     # a float's bytes
    int_bytes: int
    bool_bytes: int
    dims: tuple = ()                   # the dims the sums name (sympy symbols, the spec's)
    # the function that counts it, after the model: its name, the entry function's arguments
    # and keyword dims it takes, and the statements that read the dims where it starts
    function: str = ""
    arguments: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    prologue: tuple["Step", ...] = ()


@dataclass(frozen=True)
class MemoryGuard(Step):
    """``rt.require_memory``: the function's footprint, as its count function gives it for
    the function's arguments, checked against MEMORY_LIMIT before it starts
    (``codegen.passes.memory``)."""
    function: str
    footprint: Footprint
    identifiers: ClassVar = ("function",)
    helper: ClassVar = "require_memory"


@dataclass(frozen=True)
class Record(Step):
    """``rt.record(trace, X=X, ...)``: the named intermediates, into the caller's trace, each
    under its spec name (``keys``), held by its code name (``names``: the same, but where the
    spec's name is one the code has of its own, ``codegen.lowering.spelling``)."""
    keys: tuple[str, ...]
    names: tuple[str, ...]
    identifiers: ClassVar = ("keys", "names")
    helper: ClassVar = "record"


@dataclass(frozen=True)
class Return(Step):
    """``return a, b``; ``return None`` for no values."""
    values: tuple[str, ...]
    identifiers: ClassVar = ("values",)


# ---------------------------------------------------------------------------------------------
# Functions and the module

@dataclass(frozen=True)
class Argument(Named):
    name: str
    annotation: Type
    shape: Shape
    identifiers: ClassVar = ("name",)


@dataclass(frozen=True)
class Parameter(Named):
    """A keyword-only argument: a dim no array reveals (H), or a setting (eps)."""
    name: str
    annotation: Type
    default: Expr | None       # None when required
    meaning: str
    identifiers: ClassVar = ("name",)


@dataclass(frozen=True)
class Field(Named):
    """One entry of a parameter container."""
    name: str
    annotation: Type
    meaning: str
    identifiers: ClassVar = ("name",)


@dataclass(frozen=True)
class ParamsClass(Named):
    name: str                  # MultiHeadAttentionParams
    doc: str
    fields: tuple[Field, ...]
    identifiers: ClassVar = ("name",)


@dataclass(frozen=True)
class EquationDoc:
    """One equation as a function's docstring gives it, in the spec's plain notation (its
    LaTeX is the docs pages')."""
    plain: str
    where: str                 # spec/transformer.tspec:57


@dataclass(frozen=True)
class Function(Named):
    name: str
    summary: str
    source: str                # the seed section it comes from
    where: str                 # spec file and line of the block
    equations: tuple[EquationDoc, ...]
    arguments: tuple[Argument, ...]
    params_class: str | None
    cache: bool                # takes its instance's key-value cache (a dict of states)
    keywords: tuple[Parameter, ...]
    returns: tuple[Type, ...]  # () for None
    prologue: tuple[Step, ...]  # dims read from array shapes, checks, the memory guard
    steps: tuple[Step, ...]    # to the Record and the Return
    traces: bool = True        # takes a trace argument
    notes: tuple[str, ...] = ()  # paragraphs of the docstring after the equations
    # a block's: the run-time settings it reads (its callees' too), taken as one record of
    # the module's Settings class after its params and cache; an entry function takes each
    # as a keyword argument (``keywords``) and makes the record
    settings: tuple[str, ...] = ()
    # what its tensors take at once, where every dim of it is at hand when it starts and an
    # array gives the float's size (an entry function's): a memory guard may check it
    footprint: Footprint | None = None
    # an entry function: its arguments checked against each other by rt.entry on
    # every call (the model's and the decoding step's)
    checked: bool = False
    identifiers: ClassVar = ("name", "params_class")


@dataclass(frozen=True)
class EntryRules:
    """What the entry functions check their arguments by, besides their annotations
    (``rt.entry``): the spec's derived dims and its constraints, each with where it is
    written; the renderer prints them in the spec's notation, which the runtime evaluates;
    and the spec's names code spells otherwise (code name, spec name), by which a keyword dim
    spelt so is known."""
    lets: tuple[tuple[str, sympy.Basic], ...]
    requires: tuple[tuple[sympy.Basic, str], ...]
    spelled: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Constant(Named):
    """A module-level name the functions share: its comment and its value, None, nested
    dicts and one-item lists of tensor names, or the entry functions' rules."""
    name: str
    comment: str
    value: object
    identifiers: ClassVar = ("name",)


@dataclass(frozen=True)
class Helper:
    """A helper of a backend's runtime module (``_runtime.py``)."""
    name: str                  # the function's name
    template: str              # the template it is rendered from (the backend's choice)


@dataclass
class Module:
    spec_name: str
    title: str
    spec_file: str             # as shown: spec/transformer.tspec
    spec_hash: str
    choices: tuple[tuple[str, str], ...]
    backend: object            # codegen.backends.Backend
    params_classes: list[ParamsClass] = field(default_factory=list)
    functions: list[Function] = field(default_factory=list)
    entry: str = ""            # the model's function
    constants: list[Constant] = field(default_factory=list)
    origin: str = ""           # a variant's module: the variant it computes (as shown), else ""


def walk(record):
    """Every record inside ``record`` (a module, function, step or expression), depth first,
    itself included."""
    stack = [record]
    while stack:                        # a stack, not recursion: lowering walks every module
        record = stack.pop()
        yield record
        if isinstance(record, (list, tuple)):
            stack.extend(reversed(record))
        elif is_dataclass(record) and not isinstance(record, type):
            inside = [value for value in map(record.__getattribute__, _field_names(type(record)))
                      if isinstance(value, (list, tuple)) or is_dataclass(value)]
            stack.extend(reversed(inside))


@functools.cache
def _field_names(kind: type) -> tuple[str, ...]:
    return tuple(each.name for each in fields(kind))


def helpers_used(module: Module) -> set[str]:
    """The runtime helpers the module's code calls: its ``Runtime`` records', and those of the
    step kinds that call one (their ``helper``)."""
    return {record.name if isinstance(record, Runtime) else record.helper
            for record in walk(module.functions)
            if isinstance(record, Runtime) or isinstance(getattr(record, "helper", None), str)}
