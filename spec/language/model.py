"""The records a spec is made of: dims, constraints, choices, tensors, equations, blocks.

Everything here is plain data with the file and line it came from. ``spec.language`` builds
these records from text; the checker, the code generator and the docs read them.
"""

import functools
import re
from dataclasses import dataclass, field, replace

import sympy

from tspec.errors import SpecError
from tspec.symbolic import expr as ex
from tspec.symbolic.shape import Dim, Shape

ROLES = ("input", "param", "state", "intermediate", "output")

# The choice that turns a model into one step of incremental decoding: under its option STEP
# the decoder's self-attention keeps its keys and values as states (a key-value cache), and
# the model under FULL (the whole sequence) is the prefill that starts them. The step takes
# T_new positions after PAST ones; prefill runs the full model over those PAST positions.
DECODING = "decoding"
FULL, STEP = "full", "step"
PAST, NEW = "T_past", "T_new"


# ---------------------------------------------------------------------------------------------
# Expressions after lowering: op trees over tensor references and scalar dim expressions

@dataclass(frozen=True)
class TensorRef:
    name: str
    line: int | None = None
    column: int | None = None


@dataclass(frozen=True)
class ScalarExpr:
    expr: sympy.Basic
    line: int | None = None
    column: int | None = None


@dataclass(frozen=True)
class OpNode:
    op: str                                   # a key of spec.ops.OPS
    args: tuple
    attrs: tuple[tuple[str, object], ...] = ()
    line: int | None = None
    column: int | None = None
    text: str = field(default="", compare=False, repr=False)   # as written, for messages

    @property
    def attr(self) -> dict:
        return dict(self.attrs)


Term = TensorRef | ScalarExpr | OpNode


def tensor_names(term: Term) -> list[str]:
    """The tensors an expression reads, in order of first use."""
    found: list[str] = []

    def walk(t: Term) -> None:
        if isinstance(t, TensorRef):
            if t.name not in found:
                found.append(t.name)
        elif isinstance(t, OpNode):
            for a in t.args:
                walk(a)
    walk(term)
    return found


def op_names(term: Term) -> list[str]:
    """The ops an expression applies, innermost first."""
    found: list[str] = []

    def walk(t: Term) -> None:
        if isinstance(t, OpNode):
            for a in t.args:
                walk(a)
            found.append(t.op)
    walk(term)
    return found


# ---------------------------------------------------------------------------------------------
# Statements

@dataclass
class Constraint:
    relation: sympy.Basic           # a sympy relational over dims
    text: str
    file: str | None = None
    line: int | None = None


@dataclass
class Let:
    """A derived dim: ``let d_k = d_model / H``."""
    dim: str
    expr: sympy.Basic
    text: str
    file: str | None = None
    line: int | None = None


@dataclass
class Choice:
    name: str
    options: tuple[str, ...]
    meaning: str = ""
    file: str | None = None
    line: int | None = None

    @property
    def default(self) -> str:
        return self.options[0]


@dataclass
class Note:
    """Something a spec states that the checker cannot judge (a value domain, an index rule)."""
    text: str
    source: str = ""
    file: str | None = None
    line: int | None = None


@dataclass
class Reused:
    """``reused NAME as A, B "what each is"``: the source uses one name for different things,
    which the spec names A, B (dims, tensors or ops; one name where the spec keeps the clash
    so that the checker judges it). Reported as a finding of its own."""
    name: str
    names: tuple[str, ...]
    text: str
    source: str = ""
    file: str | None = None
    line: int | None = None


@dataclass
class Output:
    """``output NAME, NAME``: the model's outputs, at the top level or under a top-level
    ``when`` (BERT's pooled vector in place of the vocabulary scores)."""
    names: tuple[str, ...]
    file: str | None = None
    line: int | None = None


@dataclass
class TensorDecl:
    name: str
    role: str
    shape: Shape | None              # None: left unstated ('?', parameters and inputs)
    dtype: str = "float"
    meaning: str = ""
    file: str | None = None
    line: int | None = None
    unstated_family: sympy.Basic | None = None   # the family size of an unstated shape
    implied: Shape | None = None     # an unstated shape that the source's text implies
    start: str | None = None         # a state's first value: the full model's tensor of this
    #                                  name at the same place (what prefill keeps)
    # a renamed copy's declaration as the spec writes it (see ``under``): one declaration
    written: "TensorDecl | None" = field(default=None, repr=False, compare=False)

    @property
    def family(self) -> sympy.Basic | None:
        return self.unstated_family if self.shape is None else self.shape.family


@dataclass
class Equation:
    """One equation: a named output computed from an op tree (``S_h = Q_h @ K_h.T / ...``)."""
    output: str
    expr: Term
    text: str                        # the plain form, as written (normalised spacing)
    source: str = ""
    file: str | None = None
    line: int | None = None

    @functools.cached_property
    def inputs(self) -> list[str]:
        return tensor_names(self.expr)

    @functools.cached_property
    def latex(self) -> str:
        from tspec.language.latex import equation_latex  # the printer reads the op catalogue
        return equation_latex(self.output, self.expr)

    @property
    def ops(self) -> list[str]:
        return op_names(self.expr)


@dataclass
class BlockCall:
    """``Y = block(X, ...)``, or ``Y = repeat(N, block, X, ...)`` for a stack of N copies."""
    output: str
    block: str
    args: tuple[str, ...]
    instance: str
    repeat: sympy.Basic | None = None
    text: str = ""
    source: str = ""
    file: str | None = None
    line: int | None = None

    @functools.cached_property
    def inputs(self) -> list[str]:
        return list(dict.fromkeys(self.args))

    @functools.cached_property
    def latex(self) -> str:
        from tspec.language.latex import call_latex  # the printer reads the op catalogue
        return call_latex(self.output, self.block, self.args, self.repeat)


@dataclass
class Update:
    """``update K_past = K_all``: a block's state (a cache kept between decoding steps) takes
    the value of one of the block's tensors when the call ends."""
    state: str
    value: str
    file: str | None = None
    line: int | None = None

    @property
    def output(self) -> str:        # findings name the state, and the update as an equation
        return self.state

    @property
    def text(self) -> str:
        return self.value


@dataclass
class When:
    """Statements that apply only under some choice values; ``otherwise`` under the rest."""
    choice: str
    options: frozenset[str]
    body: list = field(default_factory=list)
    otherwise: list = field(default_factory=list)
    file: str | None = None
    line: int | None = None
    negate: bool = False        # `when x != a`; resolved to the other options when built
    # `when x == a and y == b` is this when around the next; the `else:` belongs to each
    chain: list = field(default_factory=list, repr=False, compare=False)


@dataclass
class Flaw:
    """A statement that cannot stand under the choices that select it (an absent operand that
    is not a term of + or -, a choice's option that names no op, an override that replaces
    nothing, a binding of a name the parent lacks). The checker reports it as a finding of its
    ``kind``; the tensor it would compute, if any, keeps its declared shape."""
    kind: str
    message: str
    output: str | None = None
    text: str = ""
    hint: str = ""
    file: str | None = None
    line: int | None = None

    @property
    def inputs(self) -> list[str]:
        return []


@dataclass
class Rename:
    """``rename BLOCK as NEW (TENSOR as NEW, ...)``: under the choices it sits in, the block is
    named NEW, every call of it too, and the listed tensors in it (see ``under``)."""
    block: str
    new: str
    tensors: tuple[tuple[str, str], ...]
    file: str | None = None
    line: int | None = None


Statement = Constraint | Let | Note | Reused | Output | TensorDecl | Equation | BlockCall | \
    Update | When | Flaw | Rename


@dataclass
class Block:
    """A reusable piece of model: inputs, local dims bound at each call, a body, one output."""
    name: str
    local_dims: dict[str, Dim]
    inputs: list[TensorDecl]
    output: str
    body: list
    file: str | None = None
    line: int | None = None


@dataclass
class Spec:
    """A whole spec file: the model is the top-level body, with blocks it calls."""
    name: str
    title: str
    file: str | None
    dims: dict[str, Dim]
    choices: dict[str, Choice]
    blocks: dict[str, Block]
    body: list
    outputs: list[str]               # every name an `output` statement gives, in any branch
    text_hash: str = ""

    def symbols(self) -> dict[str, sympy.Symbol]:
        return {name: dim.symbol for name, dim in self.dims.items()}

    def choice_values(self, given: dict[str, str] | None = None) -> dict[str, str]:
        """Every choice with a value: given ones (validated), the rest at their default."""
        given = dict(given or {})
        values = {}
        for name, choice in self.choices.items():
            value = given.pop(name, choice.default)
            if value not in choice.options:
                raise SpecError(f"choice {name} has no option {value!r}; options: "
                                f"{', '.join(choice.options)}", file=choice.file,
                                line=choice.line)
            values[name] = value
        if given:
            name = min(given)
            raise SpecError(f"unknown choice {name!r}; this spec's choices: "
                            f"{', '.join(self.choices) or 'none'}", file=self.file)
        return values


def outputs(spec: "Spec", choices: dict[str, str]) -> list[str]:
    """The model's outputs under these choice values (all of them set), in the order the
    `output` statements in force name them."""
    names: list[str] = []
    for statement in select(spec.body, choices):
        if isinstance(statement, Output):
            for name in statement.names:
                if name in names:
                    raise SpecError(f"output {name} is named twice under "
                                    f"{', '.join(f'{k}={v}' for k, v in choices.items())}",
                                    file=statement.file, line=statement.line)
                names.append(name)
    if spec.outputs and not names:
        raise SpecError(f"the model has no output under "
                        f"{', '.join(f'{k}={v}' for k, v in choices.items())}: every branch "
                        "of a choice needs an `output` statement", file=spec.file)
    return names


def choices_in_force(spec: "Spec", choices: dict[str, str]) -> dict[str, str]:
    """The choices some `when` in force consults under these values (all of them set): in
    the model's body and in the bodies of the blocks it calls. The others change nothing
    (encoder_io outside an encoder-only model), so two combinations that agree on these
    select the same statements."""
    skeleton = _when_skeleton(spec)
    found: set[str] = set()
    visited: set[str] = set()

    def walk(nodes):
        for node in nodes:
            if node[0] == "call":
                if node[1] not in visited:
                    visited.add(node[1])
                    walk(skeleton[node[1]])
            else:
                _, name, options, body, otherwise = node
                found.add(name)
                walk(body if choices[name] in options else otherwise)
    walk(skeleton[None])
    return {name: value for name, value in choices.items() if name in found}


def step_choices(spec: "Spec", chosen: dict[str, str]) -> dict[str, str] | None:
    """The choices of the decoding step of a full model (``decoding=full`` in a spec whose
    ``decoding`` has the option ``step``), or None when it has none."""
    if chosen.get(DECODING) != FULL or STEP not in spec.choices[DECODING].options:
        return None
    return chosen | {DECODING: STEP}


def decodes(spec: "Spec") -> bool:
    """Whether the spec has a decoding step beside its full model (``decoding`` with the
    options ``full`` and ``step``)."""
    choice = spec.choices.get(DECODING)
    return choice is not None and {FULL, STEP} <= set(choice.options)


def model_inputs(spec: "Spec", choices: dict[str, str]) -> list["TensorDecl"]:
    """The model's inputs under these choices (every choice the model's body consults set)."""
    return [s for s in select(spec.body, choices)
            if isinstance(s, TensorDecl) and s.role == "input"]


def prompt_dims(full: list["TensorDecl"], step: list["TensorDecl"]) -> set:
    """The dims of the full model's inputs that its decoding step's inputs lack: the
    sequence's positions (T_dec), where the step takes the new positions (T_new) and every
    position so far (T_past + T_new). Prefill runs the full model over the PAST positions
    decoded before a step: these dims count them."""
    return input_dims(full) - input_dims(step)


def input_dims(decls: list["TensorDecl"]) -> set:
    """The dims the shapes of these inputs name."""
    return set().union(*(d.shape.free_symbols() for d in decls if d.shape is not None))


def step_function(body: str | None) -> str:
    """The name of the decoding step's function for a body (None: the model's) that consults
    ``decoding``, beside the full model's function of the body's own name."""
    return "decode_step" if body is None else f"{body}_step"


def bodies_deriving(spec: "Spec", choice: str) -> set[str | None]:
    """The bodies (None: the model's) that use a derived dim some `when` on ``choice``
    defines (``when decoding == step: let q = ...``), or one derived from such a dim,
    themselves or through the blocks they call: their code can differ with the choice though
    they consult no `when` on it."""
    symbols = spec.symbols()
    lets_of: list[tuple[Let, bool]] = []

    def collect(statements, under: bool):
        for s in statements:
            if isinstance(s, When):
                collect(s.body, under or s.choice == choice)
                collect(s.otherwise, under or s.choice == choice)
            elif isinstance(s, Let):
                lets_of.append((s, under))
    collect(spec.body, False)
    found = {symbols[let.dim] for let, under in lets_of if under}
    grown = True
    while grown:
        grown = False
        for let, _ in lets_of:
            if symbols[let.dim] not in found and let.expr.free_symbols & found:
                found.add(symbols[let.dim])
                grown = True
    if not found:
        return set()

    def mentions(statements) -> bool:
        for s in statements:
            if isinstance(s, When):
                if mentions(s.body) or mentions(s.otherwise):
                    return True
            elif _symbols_of(s) & found:
                return True
        return False
    direct = {None} if mentions(spec.body) else set()
    direct |= {name for name, block in spec.blocks.items()
               if mentions(block.inputs) or mentions(block.body)}
    skeleton = _when_skeleton(spec)
    memo: dict[str | None, bool] = {}

    def uses(body: str | None) -> bool:
        if body not in memo:
            memo[body] = body in direct     # a block calling itself is refused later
            memo[body] = body in direct or any(
                uses(node[1]) for node in _calls(skeleton[body]))
        return memo[body]

    return {body for body in [None, *spec.blocks] if uses(body)}


def _calls(nodes) -> list:
    """The call nodes of a when-skeleton, in every branch."""
    found = []
    for node in nodes:
        if node[0] == "call":
            found.append(node)
        else:
            found += _calls(node[3]) + _calls(node[4])
    return found


def _symbols_of(statement) -> set:
    """The dim symbols a statement names: in its shape, its scalar expressions, its repeat
    count."""
    found: set = set()
    if isinstance(statement, TensorDecl) and statement.shape is not None:
        found |= statement.shape.free_symbols()
    elif isinstance(statement, BlockCall) and statement.repeat is not None:
        found |= sympy.sympify(statement.repeat).free_symbols
    elif isinstance(statement, Equation):
        stack = [statement.expr]
        while stack:
            term = stack.pop()
            if isinstance(term, ScalarExpr):
                found |= sympy.sympify(term.expr).free_symbols
            elif isinstance(term, OpNode):
                stack.extend(term.args)
                found |= set().union(*(v.free_symbols for _, v in term.attrs
                                       if isinstance(v, sympy.Basic)))
    return found


def bodies_consulting(spec: Spec, choices: dict[str, str] | None,
                      choice: str) -> set[str | None]:
    """The bodies (None: the model's) that consult ``choice`` under these choices (None: in
    some branch, under any choices), themselves or through the blocks they call: the
    functions whose code the choice changes."""
    skeleton = _when_skeleton(spec)
    memo: dict[str | None, bool] = {}

    def consults(body: str | None) -> bool:
        if body not in memo:
            memo[body] = False              # a block calling itself is refused later
            memo[body] = walk(skeleton[body])
        return memo[body]

    def walk(nodes) -> bool:
        found = False
        for node in nodes:
            if node[0] == "call":
                found = consults(node[1]) or found
            else:
                _, name, options, body, otherwise = node
                if choices is None:
                    found = walk(body) or walk(otherwise) or name == choice or found
                else:
                    found = walk(body if choices[name] in options else otherwise) or \
                        name == choice or found
        return found

    return {body for body in [None, *spec.blocks] if consults(body)}


MAX_WAYS = 1 << 17     # ways of setting the choices one body reads, proved in one check


def selections(spec: "Spec", block: str | None, fixed: dict[str, str]) -> list[dict[str, str]]:
    """Every way to set the choices a body consults itself that ``fixed`` leaves open, as far
    as the branches taken consult them: one dict of the newly set choices each, the options
    in the spec's order (so the first is the defaults').

    "Itself" is the body's own `when`s and those of the blocks it calls without declaring the
    call's shape (whose result the caller cannot know otherwise); a call with a declared
    shape is checked against that claim, and the callee sets its own choices. ``block`` None
    is the model's body.
    """
    skeleton = _when_skeleton(spec)

    def nodes_ways(nodes, fixed) -> list[dict]:
        ways = [{}]
        for node in nodes:
            ways = [way | more for way in ways for more in node_ways(node, fixed | way)]
            if len(ways) > MAX_WAYS:
                where = "the model" if block is None else f"block {block}"
                read = [name for name in spec.choices if any(name in way for way in ways)]
                raise SpecError(
                    f"{where} reads {len(read)} choices ({', '.join(read)}) in more than "
                    f"{MAX_WAYS:,} ways, each proved on its own; fix some of them "
                    "(--set NAME=OPTION), or declare the shape of a block call whose block "
                    "reads them", file=spec.file if block is None else spec.blocks[block].file,
                    line=None if block is None else spec.blocks[block].line)
        return ways

    def node_ways(node, fixed) -> list[dict]:
        if node[0] == "call":
            _, name, opaque = node
            return [{}] if opaque else nodes_ways(skeleton[name], fixed)
        _, name, options, body, otherwise = node
        if name in fixed:
            return nodes_ways(body if fixed[name] in options else otherwise, fixed)
        return [{name: option} | more for option in spec.choices[name].options
                for more in nodes_ways(body if option in options else otherwise,
                                       fixed | {name: option})]

    return nodes_ways(skeleton[block], dict(fixed))


def _when_skeleton(spec: "Spec") -> dict:
    """Each body (None: the model's) as its `when`s and block calls alone, nested as in the
    spec: ``("when", choice, options, body, otherwise)`` and ``("call", block, opaque)``,
    opaque when the call's shape is declared beside it (memoised on the spec)."""
    memo = spec.__dict__.get("_when_skeleton")
    if memo is not None:
        return memo

    def strip(statements):
        nodes = []
        for previous, s in zip([None] + statements[:-1], statements):
            if isinstance(s, When):
                nodes.append(("when", s.choice, s.options, strip(s.body), strip(s.otherwise)))
            elif isinstance(s, BlockCall) and s.block in spec.blocks:
                opaque = isinstance(previous, TensorDecl) and previous.name == s.output \
                    and previous.shape is not None
                nodes.append(("call", s.block, opaque))
        return nodes
    memo = {None: strip(spec.body)} | {name: strip(b.body) for name, b in spec.blocks.items()}
    spec.__dict__["_when_skeleton"] = memo
    return memo


def lets(spec: "Spec", choices: dict[str, str]) -> list["Let"]:
    """The derived dims in force under these choice values (all of them set)."""
    return [s for s in select(spec.body, choices) if isinstance(s, Let)]


def declarations(statements: list, block: "Block | None") -> tuple[dict, list]:
    """A proved body's tensor declarations by name (a declaration without a shape does not
    replace one with a shape) and its inputs: a block's own, or the model's ``input``
    declarations in order. ``statements``: the body under one choice of options."""
    decls: dict[str, TensorDecl] = {}
    for s in statements:
        if isinstance(s, TensorDecl) and not (s.name in decls and s.shape is None):
            decls[s.name] = s
    inputs = list(block.inputs) if block else [d for d in decls.values() if d.role == "input"]
    for decl in inputs:
        decls[decl.name] = decl
    return decls, inputs


def local_binding(block: "Block", shapes: list) -> dict:
    """The values a call gives a block's local dims (T_q, T_kv): read off the shapes of the
    arguments it passes (a proved call, so the shapes agree)."""
    local = {d.symbol for d in block.local_dims.values()}
    return {dim: actual for decl, shape in zip(block.inputs, shapes)
            for dim, actual in zip(decl.shape.dims, shape.dims) if dim in local}


def select(statements: list, choices: dict[str, str]) -> list:
    """The statements that apply under these choice values, with every `when` resolved."""
    out = []
    for statement in statements:
        if isinstance(statement, When):
            branch = statement.body if choices[statement.choice] in statement.options \
                else statement.otherwise
            out.extend(select(branch, choices))
        else:
            out.append(statement)
    return out


# ---------------------------------------------------------------------------------------------
# The spec under choices: renamed blocks

def under(spec: Spec, choices: dict[str, str]) -> Spec:
    """The spec as the model under these choices sees it: each `rename` in force applied (the
    block named anew, every call of it, and the tensors it lists); a block the model does not
    call there gives way to a new name. Without a rename in force, the spec itself. ``choices``
    sets every choice the `when`s around the renames consult; a choice left unset inside a
    block counts both ways. Memoised on the spec: the same choices give the same records.

    What a renamed block's text says is said of the renamed block: its records cite the source
    of the call that runs it under the new name (the source in force where the model calls
    the renamed stack: a decoder-only model's decoder is not the seeds' encoder, whose
    sections its records were written from), and the meanings of its tensors name the renamed
    blocks by their new names ("encoder output" is "decoder output")."""
    if spec.__dict__.get("_renamed"):
        return spec
    has = spec.__dict__.get("_has_renames")
    if has is None:
        has = spec.__dict__["_has_renames"] = _has_renames(spec.body)
    if not has:
        return spec
    renames = [s for s in select(spec.body, choices) if isinstance(s, Rename)]
    if not renames:
        return spec
    called = _called_blocks(spec, choices)
    sources = _renamed_sources(spec, choices, {r.block for r in renames if r.block in called})
    key = (tuple(map(id, renames)), called, tuple(sources.items()))
    memo = spec.__dict__.setdefault("_under", {})
    if key not in memo:
        memo[key] = _renamed(spec, choices, renames, called, sources)
    return memo[key]


def every_record(statements: list):
    """The records of a body in every branch of its `when`s (the `when`s themselves not)."""
    for s in statements:
        if isinstance(s, When):
            yield from every_record(s.body)
            yield from every_record(s.otherwise)
        else:
            yield s


def _has_renames(statements: list) -> bool:
    return any(isinstance(s, Rename) for s in every_record(statements))


def _called_blocks(spec: Spec, choices: dict[str, str]) -> frozenset[str]:
    """The blocks the model calls under these choices, through the blocks it calls; a `when`
    on a choice they leave unset counts both ways."""
    found: set[str] = set()

    def walk(statements):
        for s in statements:
            if isinstance(s, When):
                if s.choice not in choices:
                    walk(s.body)
                    walk(s.otherwise)
                else:
                    walk(s.body if choices[s.choice] in s.options else s.otherwise)
            elif isinstance(s, BlockCall) and s.block in spec.blocks and s.block not in found:
                found.add(s.block)
                walk(spec.blocks[s.block].body)
    walk(spec.body)
    return frozenset(found)


def _described(choices: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in choices.items()) or "any choices"


def _renamed(spec: Spec, choices: dict[str, str], renames: list[Rename],
             called: frozenset[str], sources: dict[str, str]) -> Spec:
    where = _described(choices)
    by_block: dict[str, Rename] = {}
    for rename in renames:
        first = by_block.get(rename.block) or next(
            (r for r in by_block.values() if r.new == rename.new), None)
        if first is not None:
            what = f"block {rename.block} is renamed twice" if first.block == rename.block \
                else f"blocks {first.block} and {rename.block} are both renamed {rename.new}"
            raise SpecError(f"{what} under {where} (lines {first.line} and {rename.line})",
                            file=rename.file, line=rename.line)
        by_block[rename.block] = rename
    blocks_map = {r.block: r.new for r in renames if r.block in called}
    for rename in renames:
        if rename.new in called and rename.new not in blocks_map:
            raise SpecError(f"rename {rename.block} as {rename.new}: the model calls block "
                            f"{rename.new} under {where}; a block's new name must be one it "
                            "does not call there", file=rename.file, line=rename.line)
    # a block the model does not call here keeps its name, unless a renamed block takes it,
    # or the name of a renamed block's decoding step (code generation's NEW_step)
    taken = set(blocks_map.values()) | {step_function(new) for new in blocks_map.values()}
    blocks: dict[str, Block] = {}
    for name, block in spec.blocks.items():
        if name not in called and name in taken:
            continue
        rename = by_block.get(name) if name in called else None
        tensors = dict(rename.tensors) if rename is not None else {}
        names = {**tensors, **blocks_map}
        memo: dict = {}
        text = _Text(sources.get(name) if rename is not None else None,
                     blocks_map if rename is not None else {})
        inputs, body = _renamed_body(block.inputs, names, memo, text), \
            _renamed_body(block.body, names, memo, text)
        new = blocks_map.get(name, name)
        unchanged = new == name and inputs is block.inputs and body is block.body
        blocks[new] = block if unchanged else Block(
            new, block.local_dims, inputs, tensors.get(block.output, block.output), body,
            block.file, block.line)
    renamed = replace(spec, blocks=blocks, body=_renamed_body(spec.body, blocks_map, {}))
    renamed.__dict__["_renamed"] = True
    require_function_names(renamed)
    return renamed


@dataclass(frozen=True)
class _Text:
    """What a renamed block's text becomes: the source its records cite (None: their own)
    and the blocks its meanings name by their new names (old name -> new)."""
    source: str | None = None
    blocks: dict = field(default_factory=dict)

    def cited(self, source: str) -> str:
        return source if self.source is None else self.source

    @functools.cached_property
    def _pattern(self) -> re.Pattern:
        return re.compile(r"\b(" + "|".join(map(re.escape, sorted(self.blocks, key=len,
                                                                  reverse=True))) + r")\b")

    def meaning(self, text: str) -> str:
        if not self.blocks or not text:
            return text
        return self._pattern.sub(lambda m: self.blocks[m.group()], text)


_AS_WRITTEN = _Text()


def _renamed_sources(spec: Spec, choices: dict[str, str], renamed: set[str]) -> dict[str, str]:
    """The source each renamed block's records cite under the rename: that of the call that
    runs it, first in the model's order (a renamed caller's call cites the caller's, which is
    its own call's); a call with no source in force keeps the block's own."""
    found: dict[str, str] = {}
    visited: set[str] = set()

    def walk(statements, inherited):
        for s in statements:
            if isinstance(s, When):
                if s.choice not in choices:
                    walk(s.body, inherited)
                    walk(s.otherwise, inherited)
                else:
                    walk(s.body if choices[s.choice] in s.options else s.otherwise, inherited)
            elif isinstance(s, BlockCall) and s.block in spec.blocks:
                cited = inherited if inherited is not None else s.source or None
                if s.block in renamed and cited is not None and s.block not in found:
                    found[s.block] = cited
                    walk(spec.blocks[s.block].body, cited)
                elif s.block not in visited and s.block not in found:
                    visited.add(s.block)
                    walk(spec.blocks[s.block].body, None)
    walk(spec.body, None)
    return found


def _renamed_body(statements: list, names: dict[str, str], memo: dict,
                  text: _Text = _AS_WRITTEN) -> list:
    """Records with tensors and blocks renamed (``names``: old name -> new), and their text as
    ``text`` says: the same list, and the same records, where nothing in them changes; a list
    shared by `when`s (an `else:` after `and`) stays shared."""
    if id(statements) in memo:
        return memo[id(statements)][1]
    out = [_renamed_record(s, names, memo, text) for s in statements]
    if all(a is b for a, b in zip(out, statements)):
        out = statements
    memo[id(statements)] = (statements, out)
    return out


def _renamed_record(s, names: dict[str, str], memo: dict, text: _Text = _AS_WRITTEN):
    if isinstance(s, When):
        body, otherwise = _renamed_body(s.body, names, memo, text), \
            _renamed_body(s.otherwise, names, memo, text)
        if body is s.body and otherwise is s.otherwise:
            return s
        return When(s.choice, s.options, body, otherwise, s.file, s.line)
    if isinstance(s, TensorDecl):
        meaning = text.meaning(s.meaning)
        if s.name not in names and s.start not in names and meaning == s.meaning:
            return s
        return replace(s, name=names.get(s.name, s.name), start=names.get(s.start, s.start),
                       meaning=meaning, written=s.written or s)
    if isinstance(s, Equation):
        source = text.cited(s.source)
        if s.output not in names and not any(n in names for n in s.inputs) and \
                source == s.source:
            return s
        return Equation(names.get(s.output, s.output), _renamed_term(s.expr, names),
                        _renamed_text(s.text, names, s.inputs), source, s.file, s.line)
    if isinstance(s, BlockCall):
        source = text.cited(s.source)
        if not any(n in names for n in (s.output, s.block, *s.args)) and source == s.source:
            return s
        return replace(s, output=names.get(s.output, s.output), block=names.get(s.block, s.block),
                       args=tuple(names.get(a, a) for a in s.args),
                       text=_renamed_text(s.text, names, [s.block, *s.args]), source=source)
    if isinstance(s, Note) and text.cited(s.source) != s.source:
        return replace(s, source=text.cited(s.source))
    if isinstance(s, Update) and (s.state in names or s.value in names):
        return Update(names.get(s.state, s.state), names.get(s.value, s.value), s.file, s.line)
    if isinstance(s, Flaw) and s.output in names:
        return replace(s, output=names[s.output])
    return s


def _renamed_term(term: Term, names: dict[str, str]) -> Term:
    if isinstance(term, TensorRef):
        return replace(term, name=names.get(term.name, term.name))
    if isinstance(term, OpNode):
        return replace(term, args=tuple(_renamed_term(a, names) for a in term.args),
                       text=_renamed_text(term.text, names, tensor_names(term)))
    return term


def _renamed_text(text: str, names: dict[str, str], used: list[str]) -> str:
    """An expression's text (the language's normal form) with names replaced: parsed again,
    renamed, and printed as the parser prints it."""
    if not text or not any(name in names for name in used):
        return text
    return ex.to_text(ex.renamed(ex.parse_expression(text), names))


def require_function_names(spec: Spec) -> None:
    """Generated code makes a function of each block and of the model (the spec's name): a
    block may not take the spec's name. (The decoding steps' functions, ``<block>_step`` and
    ``decode_step``, are the code's own: a block named so is spelt apart in generated code,
    codegen.lowering.spelling.)"""
    if spec.name in spec.blocks:
        block = spec.blocks[spec.name]
        raise SpecError(f"block {spec.name} has the spec's name, which the model's own "
                        "function takes in generated code; rename one", file=block.file,
                        line=block.line)
