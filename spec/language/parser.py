"""The spec language: text that reads like the math, parsed into ``spec.model`` records.

A spec is a sequence of lines; a line ending in ':' opens an indented body (``block``, ``when``,
``else``). The statements::

    spec NAME "title"                       name and title of the model
    source "seed 001, section 4"            where the following records come from
    note "text"                             something the checker cannot judge
    reused NAME as A, B "what each is"      the source uses NAME for different things, named
                                            A and B here (dims, tensors or ops; a finding)
    dim NAME "meaning" [= VALUE]            a dimension (a positive integer), maybe bound
    let NAME = EXPR                         a derived dim: let d_k = d_model / H
    require EXPR                            a constraint: d_model % H == 0, T <= max_len
    choice NAME = a | b | c "meaning"       a design choice; the first option is the default
    when NAME == a:  /  when NAME in a | b:  /  when NAME == a and OTHER != b:  /  else:
    input NAME[FAMILY] "shape" DTYPE "meaning"
    param NAME[FAMILY] "shape" "meaning"    a learned parameter ("?" leaves the shape unstated;
                                            `? implied "shape"`: unstated, but the source's
                                            text implies it, which its uses must accept)
    state NAME[FAMILY] "shape" "meaning" from TENSOR
                                            in a block: a tensor kept between calls (a decoding
                                            step's key-value cache), one per instance like a
                                            parameter; prefill starts it as the full model's
                                            TENSOR at the same place
    update STATE = TENSOR                   in a block: the state's value for the next call
    tensor NAME[FAMILY] "shape" "meaning"   an intermediate declared ahead of its equation
    output NAME, NAME                       the model's outputs (top level, or under a
                                            top-level `when`: outputs that differ by choice)
    NAME[FAMILY] "shape" = EXPR             an equation; the shape is the claim to check
    NAME "shape" = BLOCK(ARGS) [as NAME]    a call of a block
    NAME "shape" = repeat(N, BLOCK, ARGS)   a stack of N calls, each feeding the next
    block NAME(ARG "shape", ...) -> OUT:    a reusable block with its own dims and params
    param NAME "shape" "meaning" if CHOICE == a
                                            a parameter (or input) absent under the other
                                            options: a term of + or - that reads it drops
    NAME "shape" = CHOICE(X)                the op the choice's option names (an activation)
    from BLOCK with NAME = VALUE, ...       first in a block: BLOCK's declarations and
                                            equations, its inputs and local dims bound; an
                                            equation of the same output replaces BLOCK's
    rename BLOCK as NEW (TENSOR as NEW, ...)
                                            at the top level: under the choices it sits in,
                                            the block, its calls and these tensors renamed

Nothing here evaluates text: expressions go through ``spec.expr``'s parser and whitelist.
"""

import hashlib
import itertools
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path

import sympy

from tspec.errors import LimitError, SpecError, SpecSyntaxError, TspecError, hidden, hidden_kind
from tspec.files import read_limited
from tspec.language.model import (
    Block,
    BlockCall,
    Choice,
    Constraint,
    Equation,
    Flaw,
    Let,
    Note,
    OpNode,
    Output,
    Rename,
    Reused,
    ScalarExpr,
    Spec,
    TensorDecl,
    TensorRef,
    Update,
    When,
    every_record,
    require_function_names,
)
from tspec.language.names import check_name, did_you_mean
from tspec.ops.catalogue import ACTIVATIONS, FUNCTIONS, OPERATORS, OPS, SCALAR_FUNCTIONS
from tspec.symbolic import expr as ex
from tspec.symbolic.shape import DTYPES, Dim, dim_symbol, parse_shape

MAX_SPEC_BYTES = 1_000_000
MAX_NESTING = 32          # levels of block / when bodies
MAX_WAYS = 4096           # bodies one equation or one `from` expands to, over the choices
MAX_EXPANDED = 1_000_000  # statements all of them expand to together


@dataclass
class _Line:
    tokens: list[ex.Token]
    indent: int
    children: list["_Line"]

    @property
    def number(self) -> int:
        return self.tokens[0].line


def _logical_lines(tokens: list[ex.Token], file: str | None) -> list[_Line]:
    """Group tokens into lines and nest indented lines under the line that opens them."""
    flat: list[_Line] = []
    current: list[ex.Token] = []
    for token in tokens:
        if token.kind == "end":
            break
        if token.kind == "newline":
            if current:
                flat.append(_Line(current + [token], current[0].column - 1, []))
            current = []
        else:
            current.append(token)
    root = _Line([], -1, [])
    stack = [root]
    for line in flat:
        while line.indent <= stack[-1].indent:
            stack.pop()
        if len(stack) > MAX_NESTING:
            raise SpecSyntaxError(f"bodies nest more than {MAX_NESTING} levels deep",
                                  file=file, line=line.number)
        parent = stack[-1]
        if (parent is root and line.indent > 0) or (parent is not root
                                                    and not _opens_body(parent)):
            raise SpecSyntaxError("unexpected indentation", file=file, line=line.number,
                                  column=line.indent + 1)
        if parent.children and parent.children[0].indent != line.indent:
            raise SpecSyntaxError("indentation does not match the lines above", file=file,
                                  line=line.number, column=line.indent + 1)
        parent.children.append(line)
        stack.append(line)

    def verify(line: _Line) -> None:
        for child in line.children:
            if _opens_body(child) and not child.children:
                raise SpecSyntaxError("expected an indented body after ':'", file=file,
                                      line=child.number)
            verify(child)
    verify(root)
    return root.children


def _opens_body(line: _Line) -> bool:
    return len(line.tokens) >= 2 and line.tokens[-2].kind == "op" and line.tokens[-2].text == ":"


@dataclass
class _RawEquation:
    name: str
    family: ex.Node | None
    shape: str | None
    dtype: str | None
    meaning: str
    rhs: ex.Node
    instance: str | None
    source: str
    line: int
    column: int


_KEYWORDS = ("spec", "source", "note", "reused", "dim", "let", "require", "choice", "when",
             "input", "param", "state", "update", "tensor", "output", "block", "from",
             "rename")


@dataclass
class _RawOptional:
    """A declaration ending in ``if CONDITION``: present only where the condition holds."""
    decl: tuple
    conditions: list            # (choice, options, negated), as `when` reads them
    line: int


@dataclass
class _RawFrom:
    """``from BLOCK with NAME = VALUE, ...``, first in a block body."""
    parent: str
    bindings: list              # (name, value node, line, column)
    line: int
    column: int


@dataclass
class _RawFlaw:
    """A statement that cannot stand where selection puts it (see ``model.Flaw``): with the
    equation it stands for, whose declared shape the tensor keeps, or none."""
    kind: str
    message: str
    equation: "_RawEquation | None"
    line: int
    hint: str = ""


class _Reader:
    """Reads one file's lines into records."""

    def __init__(self, text: str, file: str | None):
        self.file = file
        self.text = text
        self.source = ""
        self.name: str | None = None
        self.title = ""
        self.dims: dict[str, Dim] = {}
        self.choices: dict[str, Choice] = {}
        self.blocks: dict[str, tuple[_Line, list]] = {}
        self.outputs: list[str] = []
        self.seen_outputs: set[str] = set()

    # -- helpers
    def parser(self, line: _Line, start: int = 0) -> ex.Parser:
        parser = ex.Parser(line.tokens, self.file)
        parser.pos = start
        return parser

    def error(self, message: str, line: int | None, column: int | None = None) -> SpecError:
        return SpecError(message, file=self.file, line=line, column=column)

    def string(self, parser: ex.Parser, what: str) -> str:
        token = parser.next()
        if token.kind != "string":
            raise parser.error(f"expected {what} in double quotes", token)
        return token.text[1:-1]

    def end(self, parser: ex.Parser, what: str = "statement") -> None:
        if not parser.at_line_end():
            raise parser.error(f"unexpected {parser.peek.text!r} at the end of the {what}")

    def declare_dim(self, table: dict[str, Dim], parser: ex.Parser, token: ex.Token) -> None:
        name = check_name(parser.expect_name("a dim name").text, "dim", file=self.file,
                          line=token.line)
        meaning = self.string(parser, "the dim's meaning") if parser.peek.kind == "string" else ""
        value = None
        if parser.accept("="):
            number = parser.next()
            if number.kind != "number" or not number.text.isdigit() or int(number.text) < 1:
                raise parser.error(f"dim {name}: a bound value must be a positive integer, "
                                   f"got {number.text!r}", number)
            value = int(number.text)
        self.end(parser)
        if name in self.dims or name in table:
            previous = self.dims.get(name) or table[name]
            raise self.error(f"dim {name} is declared twice (first at line {previous.line})",
                             token.line)
        if name in self.choices:
            raise self.error(f"dim {name} has the name of a choice (line "
                             f"{self.choices[name].line}); --set could not tell them apart",
                             token.line)
        table[name] = Dim(name, meaning, dim_symbol(name), value, self.file, token.line)

    # -- the file
    def read(self) -> tuple[list, list[_Line]]:
        tokens = ex.tokenize(self.text, self.file)
        lines = _logical_lines(tokens, self.file)
        body = self.statements(lines, scope="top", local_dims=None)
        return body, lines

    def statements(self, lines: list[_Line], scope: str, local_dims: dict | None) -> list:
        out: list = []
        previous_when: When | None = None
        for line in lines:
            first = line.tokens[0]
            keyword = first.text if first.kind == "name" else None
            if keyword == "else" and len(line.tokens) == 3 and line.tokens[1].text == ":":
                if previous_when is None:
                    raise self.error("'else:' without a 'when' just before it", first.line)
                otherwise = self.statements(line.children, scope, local_dims)
                for when in (previous_when, *previous_when.chain):
                    when.otherwise = otherwise
                previous_when = None
                continue
            previous_when = None
            record = self.statement(line, keyword, scope, local_dims)
            if isinstance(record, _RawFrom) and out:
                raise self.error("'from' comes first in a block body, after its dims",
                                 first.line, first.column)
            if record is not None:
                out.append(record)
                if isinstance(record, When):
                    previous_when = record
        return out

    def statement(self, line: _Line, keyword: str | None, scope: str, local_dims: dict | None):
        parser = self.parser(line, 1)
        first = line.tokens[0]
        if keyword in _KEYWORDS:
            if line.children and keyword not in ("when", "block"):
                raise SpecSyntaxError("unexpected indented lines", file=self.file,
                                      line=line.children[0].number)
            return getattr(self, f"stmt_{keyword}")(parser, first, line, scope, local_dims)
        if first.kind != "name":
            raise parser.error(f"a statement starts with a keyword or a tensor name, "
                               f"not {first.text!r}", first)
        if line.children:
            raise SpecSyntaxError("unexpected indented lines", file=self.file,
                                  line=line.children[0].number)
        return self.equation(self.parser(line, 0), first)

    def stmt_spec(self, parser, token, line, scope, local_dims):
        if scope != "top" or self.name is not None:
            raise self.error("'spec' may appear once, at the top level", token.line)
        self.name = check_name(parser.expect_name("the spec's name").text, "spec",
                               file=self.file, line=token.line)
        self.title = self.string(parser, "a title") if parser.peek.kind == "string" else ""
        self.end(parser)

    def stmt_source(self, parser, token, line, scope, local_dims):
        self.source = self.string(parser, "the source")
        self.end(parser)

    def stmt_note(self, parser, token, line, scope, local_dims):
        text = self.string(parser, "the note")
        self.end(parser)
        return Note(text, self.source, self.file, token.line)

    def stmt_reused(self, parser, token, line, scope, local_dims):
        if scope != "top":
            raise self.error("'reused' is about the source's names: it belongs at the top "
                             "level", token.line)
        name = parser.expect_name("the source's name").text
        parser.expect("as", "'as' and the names this spec gives its meanings")
        names = [parser.expect_name("a dim, tensor or op name").text]
        while parser.accept(","):
            names.append(parser.expect_name("a dim, tensor or op name").text)
        text = self.string(parser, "what each is")
        self.end(parser)
        if len(set(names)) != len(names):
            raise self.error(f"reused {name}: a name is listed twice", token.line)
        return Reused(name, tuple(names), text, self.source, self.file, token.line)

    def stmt_dim(self, parser, token, line, scope, local_dims):
        if scope == "block":
            self.declare_dim(local_dims, parser, token)
        elif scope == "top":
            self.declare_dim(self.dims, parser, token)
        else:
            raise self.error("dims are declared at the top level or in a block, "
                             "not inside 'when'", token.line)

    def stmt_let(self, parser, token, line, scope, local_dims):
        if scope == "block":
            raise self.error("'let' belongs at the top level", token.line)
        name = parser.expect_name("a dim name").text
        parser.expect("=")
        node = parser.expression()
        self.end(parser)
        return ("let", name, node, token.line)

    def stmt_require(self, parser, token, line, scope, local_dims):
        if scope == "block":
            raise self.error("'require' belongs at the top level", token.line)
        node = parser.expression()
        self.end(parser)
        if not isinstance(node, ex.Compare):
            raise self.error("a constraint compares two dim expressions "
                             "(==, !=, <, <=, >, >=)", token.line, token.column)
        return ("require", node, token.line)

    def stmt_choice(self, parser, token, line, scope, local_dims):
        if scope != "top":
            raise self.error("choices are declared at the top level", token.line)
        name = check_name(parser.expect_name("a choice name").text, "choice", file=self.file,
                          line=token.line)
        parser.expect("=")
        options = [parser.expect_name("an option").text]
        while parser.accept("|"):
            options.append(parser.expect_name("an option").text)
        meaning = self.string(parser, "the meaning") if parser.peek.kind == "string" else ""
        self.end(parser)
        if name in self.choices:
            raise self.error(f"choice {name} is declared twice", token.line)
        if name in self.dims:
            raise self.error(f"choice {name} has the name of a dim (line "
                             f"{self.dims[name].line}); --set could not tell them apart",
                             token.line)
        if len(set(options)) != len(options):
            raise self.error(f"choice {name} lists an option twice", token.line)
        for option in options:
            check_name(option, "option", file=self.file, line=token.line, value_only=True)
        self.choices[name] = Choice(name, tuple(options), meaning, self.file, token.line)

    def stmt_when(self, parser, token, line, scope, local_dims):
        conditions = [self.condition(parser)]
        while parser.accept("and"):
            conditions.append(self.condition(parser))
        parser.expect(":", "':' or 'and'")
        self.end(parser)
        inner = "when-block" if scope in ("block", "when-block") else "when"
        body = self.statements(line.children, inner, local_dims)
        # `when a == x and b == y:` is `when a == x:` around `when b == y:`; an `else:` after
        # it belongs to each of them (one list, shared)
        whens = [When(name, frozenset(options), [], [], self.file, token.line, negate)
                 for name, options, negate in conditions]
        for outer, nested in itertools.pairwise(whens):
            outer.body = [nested]
        whens[-1].body = body
        whens[0].chain = whens[1:]
        return whens[0]

    def condition(self, parser) -> tuple[str, list[str], bool]:
        """CHOICE == a, CHOICE != a, or CHOICE in a | b: the name, the options, negated."""
        name = parser.expect_name("a choice name").text
        if parser.accept("=="):
            return name, [parser.expect_name("an option").text], False
        if parser.accept("!="):
            return name, [parser.expect_name("an option").text], True
        parser.expect("in", "'==', '!=' or 'in'")
        options = [parser.expect_name("an option").text]
        while parser.accept("|"):
            options.append(parser.expect_name("an option").text)
        return name, options, False

    def stmt_input(self, parser, token, line, scope, local_dims):
        return self.declaration(parser, token, "input", scope)

    def stmt_param(self, parser, token, line, scope, local_dims):
        return self.declaration(parser, token, "param", scope)

    def stmt_state(self, parser, token, line, scope, local_dims):
        if scope not in ("block", "when-block"):
            raise self.error("'state' belongs in a block: each instance keeps its own",
                             token.line)
        parts = self.decl_parts(parser, parser.peek)
        name, line_number = parts[0], parts[6]
        if parts[2] is None:
            raise self.error(f"state {name} needs a shape in double quotes", line_number)
        if not parser.accept("from"):
            raise parser.error(f"state {name}: expected 'from' and the full model's tensor "
                               "that prefill starts it as")
        start = parser.expect_name("a tensor name after 'from'").text
        self.end(parser)
        return ("decl", "state", parts, start)

    def stmt_update(self, parser, token, line, scope, local_dims):
        if scope not in ("block", "when-block"):
            raise self.error("'update' belongs in a block, beside its state", token.line)
        state = parser.expect_name("a state's name").text
        parser.expect("=", "'='")
        value = parser.expect_name("a tensor name").text
        self.end(parser)
        return Update(state, value, self.file, token.line)

    def stmt_tensor(self, parser, token, line, scope, local_dims):
        return self.declaration(parser, token, "intermediate", scope)

    def stmt_from(self, parser, token, line, scope, local_dims):
        if scope != "block":
            raise self.error("'from' belongs first in a block body, not inside 'when' or at "
                             "the top level", token.line, token.column)
        parent = parser.expect_name("the name of the block to start from")
        bindings: list = []
        if parser.accept("with"):
            while True:
                name = parser.expect_name("an input or local dim of the block to bind")
                parser.expect("=", "'=' and what it is bound to")
                bindings.append((name.text, parser.expression(), name.line, name.column))
                if not parser.accept(","):
                    break
        self.end(parser, "'from' statement")
        return _RawFrom(parent.text, bindings, token.line, token.column)

    def stmt_rename(self, parser, token, line, scope, local_dims):
        if scope not in ("top", "when"):
            raise self.error("'rename' belongs at the top level, or under a top-level 'when'",
                             token.line, token.column)
        block = parser.expect_name("the name of the block to rename").text
        parser.expect("as", "'as' and the block's new name")
        new = check_name(parser.expect_name("the block's new name").text, "block",
                         file=self.file, line=token.line)
        tensors: list[tuple[str, str]] = []
        if parser.accept("("):
            while True:
                old = parser.expect_name("a tensor name of the block").text
                parser.expect("as", "'as' and the tensor's new name")
                tensors.append((old, check_name(parser.expect_name("the tensor's new name")
                                                .text, "tensor", file=self.file,
                                                line=token.line)))
                if not parser.accept(","):
                    break
            parser.expect(")", "')' or ','")
        self.end(parser, "'rename' statement")
        return Rename(block, new, tuple(tensors), self.file, token.line)

    def stmt_output(self, parser, token, line, scope, local_dims):
        if scope not in ("top", "when"):
            raise self.error("'output' belongs at the top level, or under a top-level 'when' "
                             "(a block names its output after '->')", token.line)
        names = [parser.expect_name("a tensor name").text]
        while parser.accept(","):
            names.append(parser.expect_name("a tensor name").text)
        self.end(parser)
        if len(set(names)) != len(names):
            name = next(n for n in names if names.count(n) > 1)
            raise self.error(f"output {name} is named twice", token.line)
        for name in names:
            if name not in self.seen_outputs:     # another branch may name it too
                self.seen_outputs.add(name)
                self.outputs.append(name)
        return Output(tuple(names), self.file, token.line)

    def stmt_block(self, parser, token, line, scope, local_dims):
        if scope != "top":
            raise self.error("blocks are declared at the top level", token.line)
        name = check_name(parser.expect_name("a block name").text, "block", file=self.file,
                          line=token.line)
        if name in self.blocks:
            raise self.error(f"block {name} is declared twice", token.line)
        if name in OPS or name in FUNCTIONS or name in SCALAR_FUNCTIONS:
            raise self.error(f"block name {name} is the name of an op", token.line)
        parser.expect("(")
        inputs = []
        while not parser.at(")"):
            inputs.append(self.decl_parts(parser, parser.peek))
            if not parser.accept(","):
                break
        parser.expect(")", "')' or ','")
        parser.expect("->")
        output = parser.expect_name("the output tensor's name").text
        parser.expect(":")
        self.end(parser)
        local: dict[str, Dim] = {}
        body = self.statements(line.children, "block", local)
        self.blocks[name] = (line, inputs, output, local, body)

    # -- declarations and equations
    def decl_parts(self, parser: ex.Parser, token: ex.Token) -> tuple:
        """NAME [FAMILY] ("shape" | ?) [dtype] ["meaning"]"""
        name = check_name(parser.expect_name("a tensor name").text, "tensor", file=self.file,
                          line=token.line)
        family = None
        if parser.accept("["):
            family = parser.expression()
            parser.expect("]")
        shape: str | None = None
        unstated = False
        implied: str | None = None
        if parser.peek.kind == "string":
            shape = self.string(parser, "a shape")
            if parser.peek.kind == "name" and parser.peek.text == "implied":
                raise parser.error(f"{name}: 'implied' follows '?' (an unstated shape); a "
                                   "stated shape needs none")
        elif parser.accept("?"):
            unstated = True
            if parser.peek.kind == "name" and parser.peek.text == "implied":
                parser.next()
                implied = self.string(parser, "the shape the source implies")
        dtype = None
        if parser.peek.kind == "name" and parser.peek.text in DTYPES:
            dtype = parser.next().text
        meaning = self.string(parser, "a meaning") if parser.peek.kind == "string" else ""
        return (name, family, shape, unstated, dtype, meaning, token.line, implied)

    def declaration(self, parser, token, role, scope):
        parts = self.decl_parts(parser, parser.peek)
        conditions = []
        if parser.at("if"):
            if role not in ("param", "input"):
                raise parser.error(f"{parts[0]}: only a param or an input may be absent under "
                                   "a choice ('if ...')")
            parser.next()
            conditions.append(self.condition(parser))
            while parser.accept("and"):
                conditions.append(self.condition(parser))
        self.end(parser)
        name, _family, shape, unstated, _dtype, _meaning, line, _implied = parts
        if shape is None and not unstated and role != "param":
            raise self.error(f"{role} {name} needs a shape in double quotes (or '?' when the "
                             "source leaves it unstated)", line)
        if unstated and role not in ("param", "input"):
            raise self.error(f"only parameters and inputs may leave their shape unstated "
                             f"('?'); {name} is an {role}", line)
        if conditions:
            return _RawOptional(("decl", role, parts), conditions, line)
        return ("decl", role, parts)

    def equation(self, parser: ex.Parser, token: ex.Token):
        name, family, shape, unstated, dtype, meaning, line, _implied = \
            self.decl_parts(parser, token)
        if unstated:
            raise self.error(f"{name}: '?' is for parameters; leave the shape out of an "
                             "equation to have it inferred", line)
        parser.expect("=", "'=' (an equation) or a keyword")
        rhs = parser.expression()
        instance = None
        if parser.accept("as"):
            instance = check_name(parser.expect_name("an instance name").text, "instance",
                                  file=self.file, line=line)
        self.end(parser, "equation")
        return _RawEquation(name, family, shape, dtype, meaning, rhs, instance, self.source,
                            line, token.column)


class _Builder:
    """Turns raw statements into model records, resolving names in each scope."""

    def __init__(self, reader: _Reader):
        self.r = reader
        self.file = reader.file
        self.expanded = 0        # statements the choices' expansions have made so far

    def expand_by(self, count: int) -> None:
        """Count statements an expansion makes (an equation per way of setting the choices it
        varies by, a `from` block's body per way): past MAX_EXPANDED, a LimitError."""
        self.expanded += count
        if self.expanded > MAX_EXPANDED:
            raise LimitError(f"the spec's optional operands, choice calls and `from` blocks "
                             f"expand to more than {MAX_EXPANDED:,} statements over its "
                             "choices: vary fewer equations by more choices", file=self.file)

    def error(self, message, line, column=None) -> SpecError:
        return SpecError(message, file=self.file, line=line, column=column)

    def build(self, body: list) -> Spec:
        r = self.r
        symbols = {name: dim.symbol for name, dim in r.dims.items()}
        blocks: dict[str, Block] = {}
        block_names = set(r.blocks)
        expanded: dict[str, tuple[list, dict]] = {}
        for name in r.blocks:
            self.expand(name, expanded, ())
        for name, (line, inputs, output, _, _) in r.blocks.items():
            raw_body, local = expanded[name]
            block_symbols = {**symbols, **{n: d.symbol for n, d in local.items()}}
            input_decls = []
            for parts in inputs:
                decl = self.tensor_decl("input", parts, block_symbols)
                if decl.shape is None:
                    raise self.error(f"block {name}: input {decl.name} needs a shape", decl.line)
                input_decls.append(decl)
            records = self.scope(raw_body, block_symbols, block_names, input_decls,
                                 f"block {name}", outputs=[output])
            blocks[name] = Block(name, local, input_decls, output, records, self.file,
                                 line.number)
        records = self.scope(body, symbols, block_names, [], "the model", outputs=r.outputs)
        self.check_reused(records, blocks)
        self.check_renames(records, blocks)
        name = r.name or (Path(self.file).stem if self.file else "spec")
        digest = hashlib.sha256(r.text.encode()).hexdigest()[:16]
        built = Spec(name, r.title, self.file, dict(r.dims), dict(r.choices), blocks, records,
                     list(r.outputs), digest)
        require_function_names(built)
        return built

    # -- `from BLOCK with ...`
    def expand(self, name: str, expanded: dict, active: tuple) -> tuple[list, dict]:
        """A block's raw body and local dims, with a `from` statement at its start expanded
        (see ``inherit``); memoised in ``expanded``."""
        if name in expanded:
            return expanded[name]
        _, _, _, local, body = self.r.blocks[name]
        if not body or not isinstance(body[0], _RawFrom):
            expanded[name] = (body, local)
            return expanded[name]
        start = body[0]
        if start.parent not in self.r.blocks:
            raise self.error(f"from: unknown block {start.parent!r}"
                             f"{_suggest(start.parent, self.r.blocks)}", start.line,
                             start.column)
        if start.parent == name or start.parent in active:
            cycle = active[active.index(start.parent):] if start.parent in active else ()
            raise self.error(f"block {name} starts from itself: "
                             f"{' -> '.join(cycle + (name, start.parent))}", start.line,
                             start.column)
        parent_body, parent_local = self.expand(start.parent, expanded, active + (name,))
        expanded[name] = self.inherit(name, start, body[1:], parent_body, parent_local)
        return expanded[name]

    def inherit(self, name: str, start: _RawFrom, own: list, parent_body: list,
                parent_local: dict) -> tuple[list, dict]:
        """A block that starts ``from PARENT with ...``: the parent's declarations and
        equations, its inputs and local dims bound as the bindings say (an input the block
        takes itself stays), with the block's own statements. Per selection of the choices:
        an own equation of an output the parent computes takes that equation's place, the
        own statements before it just ahead of it, the rest after the parent's. Built as
        `when`s over the choices the two consult, so each selection is an ordinary body."""
        r, parent = self.r, start.parent
        _, inputs, _, local, _ = r.blocks[name]
        parent_inputs = [parts[0] for parts in r.blocks[parent][1]]
        own_inputs = {parts[0] for parts in inputs}
        own_tensors = own_inputs | set(_raw_names(own))
        symbols = {n: d.symbol for n, d in {**r.dims, **parent_local, **local}.items()}
        bound: dict[str, ex.Node] = {}
        flaws: list = []
        for key, node, line, column in start.bindings:
            if key in bound:
                raise self.error(f"from {parent}: {key} is bound twice", line, column)
            if key in parent_inputs:
                if not isinstance(node, ex.Name) or node.id not in own_tensors:
                    raise self.error(f"from {parent}: {key} = {ex.to_text(node)}: an input is "
                                     f"bound to a tensor of block {name}", node.line,
                                     node.column)
            elif key in parent_local:
                ex.to_sympy(node, symbols, file=self.file, what=f"from {parent}: {key}")
            else:
                known = parent_inputs + list(parent_local)
                flaws.append(_RawFlaw("unknown-binding", f"{parent} has no input or local dim "
                                      f"{key} to bind; it has {', '.join(known)}", None, line,
                                      f"bind one of those{_suggest(key, known)}"))
                continue
            bound[key] = node
        for key in parent_inputs:
            if key not in bound and key not in own_inputs:
                raise self.error(f"from {parent}: its input {key} is neither bound (with {key} "
                                 f"= ...) nor an input of block {name}", start.line,
                                 start.column)
        local = dict(local)
        for key, dim in parent_local.items():
            if key not in bound and key not in r.dims:
                local.setdefault(key, dim)
        computed = set(_raw_names(parent_body, equations_only=True))
        copies: dict[int, object] = {}
        flawed: dict[int, _RawFlaw] = {}

        def inherited(s):
            if id(s) not in copies:
                copies[id(s)] = self.bound(s, bound)
            return copies[id(s)]

        def overrides_nothing(s: _RawEquation) -> _RawFlaw:
            if id(s) not in flawed:
                where = " or ".join(" and ".join(f"{c}={'|'.join(o)}" for c, o in path)
                                    for path in self.paths(parent_body, s.name))
                flawed[id(s)] = _RawFlaw(
                    "unknown-override", f"{s.name} overrides nothing here: {parent} computes "
                    f"{s.name} only under {where}", s, s.line,
                    f"put this equation under the choices {parent} computes {s.name} under, or "
                    "give it a name of its own")
            return flawed[id(s)]

        def merged(theirs: list, mine: list) -> list:
            here = {s.name for s in theirs if isinstance(s, _RawEquation)}
            ahead: dict[str, tuple[list, _RawEquation]] = {}
            pending: list = []
            for s in mine:
                if isinstance(s, _RawEquation) and s.name in here and s.name not in ahead:
                    ahead[s.name] = (pending, s)
                    pending = []
                elif isinstance(s, _RawEquation) and s.name in computed - here:
                    pending.append(overrides_nothing(s))
                else:
                    pending.append(s)
            out: list = []
            for s in theirs:
                if isinstance(s, _RawEquation) and s.name in ahead:
                    out += ahead[s.name][0] + [ahead[s.name][1]]
                else:
                    out.append(inherited(s))
            return out + pending

        ways = [0]

        def tree(chosen: dict) -> tuple[list, object]:
            theirs, mine = [], []
            open_ = self.selected(parent_body, chosen, theirs) or \
                self.selected(own, chosen, mine)
            if open_ is None:
                ways[0] += 1
                if ways[0] > MAX_WAYS:
                    raise self.error(f"block {name}: {parent} and its own statements differ "
                                     f"in more than {MAX_WAYS:,} ways of setting the choices",
                                     start.line, start.column)
                body = merged(theirs, mine)
                self.expand_by(len(body))
                return body, tuple(map(id, body))
            return _chain(open_, [(o, tree(chosen | {open_: o}))
                                  for o in r.choices[open_].options], self.file, start.line)

        body, _ = tree({})
        return flaws + body, local

    def selected(self, statements: list, chosen: dict, out: list) -> str | None:
        """The raw statements that apply under ``chosen`` into ``out``, or the first choice a
        `when` consults that ``chosen`` leaves unset."""
        for s in statements:
            if isinstance(s, When):
                self.check_when(s)
                if s.choice not in chosen:
                    return s.choice
                hit = (chosen[s.choice] in s.options) != s.negate
                open_ = self.selected(s.body if hit else s.otherwise, chosen, out)
                if open_ is not None:
                    return open_
            else:
                out.append(s)
        return None

    def paths(self, statements: list, name: str) -> list[list[tuple[str, list[str]]]]:
        """The conditions under which raw statements compute ``name``: each a list of
        (choice, its options there), one list per equation of it."""
        found = []
        for s in statements:
            if isinstance(s, When):
                options = self.r.choices[s.choice].options
                hit = [o for o in options if (o in s.options) != s.negate]
                for branch, chosen in ((s.body, hit), (s.otherwise,
                                                       [o for o in options if o not in hit])):
                    found += [[(s.choice, chosen)] + path for path in self.paths(branch, name)]
            elif isinstance(s, _RawEquation) and s.name == name:
                found.append([])
        return found

    def bound(self, s, names: dict):
        """A raw statement of a parent block with its inputs and local dims bound."""
        if not names:
            return s
        if isinstance(s, tuple) and s[0] == "decl":
            return ("decl", s[1], self.bound_parts(s[2], names), *s[3:])
        if isinstance(s, _RawOptional):
            return replace(s, decl=self.bound(s.decl, names))
        if isinstance(s, _RawEquation):
            return replace(s, family=None if s.family is None else ex.renamed(s.family, names),
                           shape=self.bound_shape(s.shape, names),
                           rhs=ex.renamed(s.rhs, names))
        if isinstance(s, Update):
            return Update(*(_bound_name(n, names) for n in (s.state, s.value)), s.file, s.line)
        if isinstance(s, _RawFlaw) and s.equation is not None:
            return replace(s, equation=self.bound(s.equation, names))
        return s

    def bound_parts(self, parts: tuple, names: dict) -> tuple:
        name, family, shape, unstated, dtype, meaning, line, implied = parts
        return (_bound_name(name, names), None if family is None else ex.renamed(family, names),
                self.bound_shape(shape, names), unstated, dtype, meaning, line,
                self.bound_shape(implied, names))

    def bound_shape(self, text: str | None, names: dict) -> str | None:
        """A shape string with bound dims put in, token by token (a token that does not parse
        stays, for the parent's own error)."""
        if text is None:
            return None
        tokens = []
        for token in text.split():
            try:
                node = ex.parse_expression(token, self.file)
            except LimitError:          # the time limit, fired in here: never swallowed
                raise
            except TspecError:
                tokens.append(token)
                continue
            new = ex.renamed(node, names)
            tokens.append(token if new == node else ex.to_text(new).replace(" ", ""))
        return " ".join(tokens)

    def condition_options(self, condition: tuple, line: int) -> tuple[str, frozenset]:
        """An `if` condition's choice and the options it holds under."""
        name, options, negate = condition
        self.check_when(When(name, frozenset(options), file=self.file, line=line), "if")
        chosen = frozenset(options)
        if negate:
            chosen = frozenset(self.r.choices[name].options) - chosen
        return name, chosen

    def check_renames(self, records: list, blocks: dict[str, Block]) -> None:
        """Each `rename` names a block of the spec, a new name no op has, and tensors of the
        block, each given a name it does not use."""
        for s in every_record(records):
            if not isinstance(s, Rename):
                continue
            block = blocks.get(s.block)
            if block is None:
                raise self.error(f"rename: unknown block {s.block!r}{_suggest(s.block, blocks)}",
                                 s.line)
            if s.new in OPS or s.new in FUNCTIONS or s.new in SCALAR_FUNCTIONS:
                raise self.error(f"rename {s.block} as {s.new}: {s.new} is the name of an op",
                                 s.line)
            if s.new in self.r.dims or any(s.new in _block_names(b) for b in blocks.values()) \
                    or any(isinstance(t, TensorDecl) and t.name == s.new
                           for t in every_record(records)):
                raise self.error(f"rename {s.block} as {s.new}: {s.new} is a dim or a tensor of "
                                 "this spec; a block takes a name of its own", s.line)
            names = _block_names(block)
            taken = names | set(self.r.dims) | set(block.local_dims) | set(blocks)
            olds = [old for old, _ in s.tensors]
            news = [new for _, new in s.tensors]
            for old, new in s.tensors:
                if old not in names:
                    raise self.error(f"rename {s.block}: {old!r} is not a tensor of block "
                                     f"{s.block}{_suggest(old, sorted(names))}", s.line)
                if olds.count(old) > 1 or news.count(new) > 1:
                    twice = old if olds.count(old) > 1 else new
                    raise self.error(f"rename {s.block}: {twice} is listed twice", s.line)
                if new in taken and new not in olds:
                    raise self.error(f"rename {s.block}: {new} is already a name in block "
                                     f"{s.block} or the spec", s.line)

    def check_reused(self, records: list, blocks: dict[str, Block]) -> None:
        """Each name a `reused` statement lists is a dim, a tensor (of the model or of any
        block) or an op of this spec."""
        known = set(self.r.dims) | set(OPS)

        def collect(statements):
            for s in statements:
                if isinstance(s, TensorDecl):
                    known.add(s.name)
                elif isinstance(s, When):
                    collect(s.body)
                    collect(s.otherwise)
        collect(records)
        for block in blocks.values():
            known.update(block.local_dims)
            collect(block.inputs)
            collect(block.body)
        for s in records:
            if isinstance(s, Reused):
                for name in s.names:
                    if name not in known:
                        raise self.error(f"reused {s.name}: {name!r} is not a dim, tensor or "
                                         f"op of this spec{_suggest(name, known)}", s.line)

    def check_when(self, when: When, word: str = "when") -> None:
        choice = self.r.choices.get(when.choice)
        if choice is None:
            raise self.error(f"'{word}' names unknown choice {when.choice!r}"
                             f"{_suggest(when.choice, self.r.choices)}", when.line)
        for option in sorted(when.options):
            if option not in choice.options:
                raise self.error(f"choice {when.choice} has no option {option!r}; "
                                 f"options: {', '.join(choice.options)}", when.line)

    def tensor_decl(self, role: str, parts: tuple, symbols: dict) -> TensorDecl:
        name, family, shape, unstated, dtype, meaning, line, implied = parts
        parsed, unstated_family, implied_shape = None, None, None
        if shape is not None:
            parsed = parse_shape(shape, symbols, file=self.file, line=line, family=family)
        elif family is not None and unstated:
            unstated_family = ex.to_sympy(family, symbols, file=self.file, what="family size")
        elif family is not None:
            raise self.error(f"{name}: a family size needs a member shape", line)
        if implied is not None:
            implied_shape = parse_shape(implied, symbols, file=self.file, line=line,
                                        family=family)
        return TensorDecl(name, role, parsed, dtype or "float", meaning, self.file, line,
                          unstated_family, implied_shape)

    def require_instances_apart(self, raw: list, tensors: dict[str, int], where: str) -> None:
        """An instance is a key of its scope's parameters and of its trace, beside the
        scope's parameters and tensors: one named like them is refused."""
        for s in raw:
            if isinstance(s, When):
                self.require_instances_apart(s.body, tensors, where)
                self.require_instances_apart(s.otherwise, tensors, where)
            elif isinstance(s, _RawEquation) and s.instance in tensors:
                raise self.error(f"instance {s.instance} has the name of a tensor or parameter "
                                 f"in {where} (line {tensors[s.instance]}): both would be "
                                 f"params['{s.instance}'] and trace['{s.instance}']; name the "
                                 "instance otherwise", s.line)

    def scope(self, raw: list, symbols: dict, blocks: set, inputs: list[TensorDecl], where: str,
              outputs: list[str]) -> list:
        """Lower one scope (the model or a block): its tensor names are known up front."""
        tensors: dict[str, int] = {d.name: d.line for d in inputs}
        optional: dict[str, tuple] = {}      # name -> (its condition, the line declaring it)
        plain: dict[str, int] = {}           # declared without `if`: name -> line

        def collect(statements):
            for s in statements:
                if isinstance(s, _RawOptional):
                    name = s.decl[2][0]
                    tensors.setdefault(name, s.line)
                    condition = tuple(self.condition_options(c, s.line) for c in s.conditions)
                    first = optional.setdefault(name, (condition, s.line))
                    if first[0] != condition:
                        raise self.error(f"{name} is absent under another condition at line "
                                         f"{first[1]}; declare it under one", s.line)
                elif isinstance(s, tuple) and s[0] == "decl":
                    tensors.setdefault(s[2][0], s[2][6])
                    plain.setdefault(s[2][0], s[2][6])
                elif isinstance(s, _RawEquation):
                    tensors.setdefault(s.name, s.line)
                elif isinstance(s, _RawFlaw) and s.equation is not None:
                    tensors.setdefault(s.equation.name, s.equation.line)
                elif isinstance(s, When):
                    collect(s.body)
                    collect(s.otherwise)
        collect(raw)
        self.require_instances_apart(raw, tensors, where)
        for name, line in tensors.items():
            if name in symbols:
                raise self.error(f"{name} is both a dim and a tensor in {where}", line)
            if name in blocks:
                raise self.error(f"{name} is both a block and a tensor in {where}", line)
            if name in optional and name in plain:
                raise self.error(f"{name} is declared with 'if' at line {optional[name][1]} "
                                 f"and without at line {plain[name]}: give every declaration "
                                 "of it the same condition", max(optional[name][1], plain[name]))
        lowering = _Lowering(self.file, symbols, set(tensors), blocks, self.r.choices,
                             {name: condition for name, (condition, _) in optional.items()},
                             self.expand_by)
        output_set = set(outputs)

        converted: dict[int, tuple[list, list]] = {}   # a shared `else:` list, once
        records_of: dict[int, tuple[object, list]] = {}  # a statement in several lists, once

        def convert(statements):
            if id(statements) in converted:
                return converted[id(statements)][1]
            out = []
            converted[id(statements)] = (statements, out)
            for s in statements:
                if isinstance(s, When):
                    self.check_when(s)
                    if s.negate:
                        options = self.r.choices[s.choice].options
                        s.options, s.negate = frozenset(options) - s.options, False
                    s.body = convert(s.body)
                    s.otherwise = convert(s.otherwise)
                    out.append(s)
                    continue
                if id(s) not in records_of:
                    records_of[id(s)] = (s, records(s))
                out.extend(records_of[id(s)][1])
            return out

        def declared(s: _RawEquation) -> TensorDecl:
            role = "output" if s.name in output_set else "intermediate"
            if s.shape is not None or s.family is not None:
                return self.tensor_decl(role, (s.name, s.family, s.shape, False, s.dtype,
                                               s.meaning, s.line, None), symbols)
            return TensorDecl(s.name, role, None, s.dtype or "float", s.meaning, self.file,
                              s.line)

        def records(s) -> list:
            if isinstance(s, (Note, Reused, Output, Rename)):
                return [s]
            if isinstance(s, tuple) and s[0] == "decl":
                decl = self.tensor_decl(s[1], s[2], symbols)
                if s[1] == "state":
                    decl.start = s[3]
                return [decl]
            if isinstance(s, _RawOptional):
                nested = records(s.decl)
                for choice, options in reversed(optional[s.decl[2][0]][0]):
                    nested = [When(choice, options, nested, [], self.file, s.line)]
                return nested
            if isinstance(s, Update):
                for name in (s.state, s.value):
                    if name not in tensors:
                        raise self.error(f"update: {name!r} is not a tensor of {where}"
                                         f"{_suggest(name, tensors)}", s.line)
                return [s]
            if isinstance(s, tuple) and s[0] == "let":
                _, name, node, line = s
                if name not in symbols:
                    raise self.error(f"let: unknown dim {name!r}{_suggest(name, symbols)}",
                                     line)
                value = ex.to_sympy(node, symbols, file=self.file, what=f"let {name}")
                if symbols[name] in value.free_symbols:
                    raise self.error(f"let {name} refers to itself", line)
                return [Let(name, value, ex.to_text(node), self.file, line)]
            if isinstance(s, tuple) and s[0] == "require":
                _, node, line = s
                relation = ex.to_sympy(node, symbols, file=self.file, what="constraint",
                                       relational=True)
                return [Constraint(relation, ex.to_text(node), self.file, line)]
            if isinstance(s, _RawEquation):
                return [declared(s), *lowering.variants(s)]
            if isinstance(s, _RawFlaw):
                equation = s.equation
                flaw = Flaw(s.kind, s.message, None if equation is None else equation.name,
                            "" if equation is None else ex.to_text(equation.rhs), s.hint,
                            self.file, s.line)
                return [flaw] if equation is None else [declared(equation), flaw]
            raise AssertionError(s)

        records_ = convert(raw)
        for name in outputs:
            if name not in tensors:
                raise self.error(f"output {name!r} of {where} is never defined"
                                 f"{_suggest(name, tensors)}", None)
        return records_


_suggest = did_you_mean


def _chain(choice: str, subtrees: list, file: str | None, line: int) -> tuple[list, object]:
    """Bodies that differ by one choice's option as one body: ``subtrees`` holds (option,
    (statements, signature)); options whose statements are the same (by signature) share a
    `when`, the last group is the `else:` of the one before. Returns the statements and their
    signature."""
    groups: dict = {}
    for option, (statements, signature) in subtrees:
        groups.setdefault(signature, (statements, []))[1].append(option)
    items = list(groups.items())
    if len(items) == 1:
        return items[0][1][0], items[0][0]
    statements = items[-1][1][0]
    for _, (body, options) in reversed(items[:-1]):
        statements = [When(choice, frozenset(options), body, statements, file, line)]
    return statements, (choice, tuple((frozenset(options), signature)
                                      for signature, (_, options) in items))


def _raw_names(statements: list, equations_only: bool = False) -> list[str]:
    """The tensors raw statements declare or compute, in every branch."""
    found = []
    for s in statements:
        if isinstance(s, When):
            found += _raw_names(s.body, equations_only) + _raw_names(s.otherwise, equations_only)
        elif isinstance(s, _RawEquation):
            found.append(s.name)
        elif equations_only:
            continue
        elif isinstance(s, tuple) and s[0] == "decl":
            found.append(s[2][0])
        elif isinstance(s, _RawOptional):
            found.append(s.decl[2][0])
    return found


def _bound_name(name: str, names: dict) -> str:
    """A tensor's name where a binding names another tensor for it."""
    node = names.get(name)
    return node.id if isinstance(node, ex.Name) else name


def _block_names(block: Block) -> set[str]:
    """Every tensor name of a block: its inputs, and what its body declares or computes."""
    found = {d.name for d in block.inputs}
    for s in every_record(block.body):
        if isinstance(s, TensorDecl):
            found.add(s.name)
        elif isinstance(s, (Equation, BlockCall)) or isinstance(s, Flaw) and s.output:
            found.add(s.output)
    return found


def _children(node: ex.Node) -> list[tuple[str, object]]:
    """The fields of an expression node that hold expressions (a call's arguments as a tuple,
    its keyword arguments as a tuple of pairs)."""
    if isinstance(node, ex.Unary):
        return [("operand", node.operand)]
    if isinstance(node, (ex.Binary, ex.Compare)):
        return [("left", node.left), ("right", node.right)]
    if isinstance(node, ex.Call):
        return [("args", node.args), ("kwargs", node.kwargs)]
    if isinstance(node, ex.Attribute):
        return [("value", node.value)]
    if isinstance(node, ex.Subscript):
        return [("value", node.value), ("index", node.index)]
    if isinstance(node, ex.Slice):
        return [("stop", node.stop), ("start", node.start)]
    return []


def _nodes(node: ex.Node | None):
    """Every node of an expression, the node first."""
    if node is None:
        return
    yield node
    for _, value in _children(node):
        for item in value if isinstance(value, tuple) else (value,):
            yield from _nodes(item[1] if isinstance(item, tuple) else item)


class _Flawed(Exception):
    """An equation that cannot stand under some options (see ``model.Flaw``)."""

    def __init__(self, kind: str, message: str, hint: str = ""):
        super().__init__(message)
        self.kind, self.message, self.hint = kind, message, hint


@dataclass(frozen=True)
class _Absent:
    """What an expression is when every term of it is absent: the absent names."""
    names: tuple[str, ...]


class _Lowering:
    """Expression trees to op trees, in one scope: names are tensors, dims, or errors."""

    def __init__(self, file, symbols: dict, tensors: set, blocks: set,
                 choices: dict | None = None, optional: dict | None = None,
                 expand_by=lambda count: None):
        self.file = file
        self.symbols = symbols
        self.tensors = tensors
        self.blocks = blocks
        self.choices = choices or {}
        self.optional = optional or {}     # tensor -> ((choice, options it is present under), ...)
        self.expand_by = expand_by         # counts the equations variants make (a bound)

    def error(self, message, node) -> SpecError:
        return SpecError(message, file=self.file, line=node.line, column=node.column)

    def variants(self, raw: _RawEquation) -> list:
        """An equation's records: the equation, or where it calls a choice (``activation(X)``)
        or reads a tensor absent under some options (``if ...``), the equation each way of
        setting those choices gives, as `when`s (ways that give the same equation share one;
        a way that gives none is a Flaw)."""
        called, read = set(), set()
        for node in _nodes(raw.rhs):
            if isinstance(node, ex.Call) and self.chooses(node):
                if len(node.args) != 1 or node.kwargs:
                    raise self.error(f"{node.func}(...) applies the op its option names to one "
                                     "tensor: give it one argument", node)
                called.add(node.func)
            elif isinstance(node, ex.Name) and node.id in self.optional:
                read.add(node.id)
        if not called and not read:
            return [self.equation(raw)]
        involved = called | {choice for name in read for choice, _ in self.optional[name]}
        order = [name for name in self.choices if name in involved]
        ways = 1
        for name in order:
            ways *= len(self.choices[name].options)
        if ways > MAX_WAYS:
            raise self.error(f"{raw.name}: its choices and absent operands make {ways:,} "
                             f"equations; the limit is {MAX_WAYS:,}", raw.rhs)
        self.expand_by(ways)
        made: dict = {}

        def leaf(chosen: dict) -> tuple[list, object]:
            try:
                rhs = self.varied(raw, chosen, called)
                key = ex.to_text(rhs)
                if key not in made:
                    made[key] = self.equation(replace(raw, rhs=rhs))
            except _Flawed as flaw:
                key = (flaw.kind, flaw.message)
                if key not in made:
                    made[key] = Flaw(flaw.kind, flaw.message, raw.name, ex.to_text(raw.rhs),
                                     flaw.hint, self.file, raw.line)
            return [made[key]], key

        def tree(chosen: dict, rest: list) -> tuple[list, object]:
            if not rest:
                return leaf(chosen)
            return _chain(rest[0], [(o, tree(chosen | {rest[0]: o}, rest[1:]))
                                    for o in self.choices[rest[0]].options], self.file, raw.line)

        return tree({}, order)[0]

    def chooses(self, node: ex.Call) -> bool:
        """Whether a call names a choice (the op its option names), not an op or a block."""
        return node.func in self.choices and node.func not in FUNCTIONS and \
            node.func not in SCALAR_FUNCTIONS and node.func not in self.blocks

    def varied(self, raw: _RawEquation, chosen: dict, called: set) -> ex.Node:
        """The right-hand side under these options: each choice called as the op its option
        names, each absent tensor dropped as a term of + or - (raises _Flawed where it is
        something else, or where no term is left)."""
        absent = {name for name, condition in self.optional.items()
                  if any(chosen.get(choice, next(iter(options))) not in options
                         for choice, options in condition)}

        def under(name: str) -> str:
            return ", ".join(f"{choice}={chosen[choice]}" for choice, _ in self.optional[name])

        def vary(node: ex.Node):
            if isinstance(node, ex.Name):
                return _Absent((node.id,)) if node.id in absent else node
            if isinstance(node, ex.Binary) and node.op in ("+", "-"):
                left, right = vary(node.left), vary(node.right)
                if isinstance(left, _Absent) and isinstance(right, _Absent):
                    return _Absent(left.names + right.names)
                if isinstance(right, _Absent):
                    return left
                if isinstance(left, _Absent):
                    return right if node.op == "+" else ex.Unary(node.line, node.column, "-",
                                                                  right)
                return replace(node, left=left, right=right)
            if isinstance(node, ex.Unary) and node.op == "-":
                operand = vary(node.operand)
                return operand if isinstance(operand, _Absent) else \
                    replace(node, operand=operand)
            if isinstance(node, ex.Call) and node.func in called:
                option = chosen[node.func]
                if FUNCTIONS.get(option) not in ACTIVATIONS:
                    raise _Flawed("not-an-op", f"{node.func}={option} names no activation op; "
                                  f"put this equation under `when {node.func} != {option}`")
                node = replace(node, func=option)
            parts = {}
            for key, value in _children(node):
                if isinstance(value, tuple):      # a call's arguments or keyword arguments
                    parts[key] = tuple((v[0], term(v[1])) if isinstance(v, tuple) else term(v)
                                       for v in value)
                else:
                    parts[key] = term(value)
            return replace(node, **parts) if parts else node

        def term(node: ex.Node | None):
            """An operand that is not a term of + or -: an absent one is a flaw."""
            if node is None:
                return None
            varied = vary(node)
            if isinstance(varied, _Absent):
                name = varied.names[0]
                raise _Flawed("absent-operand", f"{name} is absent under {under(name)}; only a "
                              "term of + or - may be absent",
                              f"declare {name} without 'if', or add it as a term")
            return varied

        result = vary(raw.rhs)
        if isinstance(result, _Absent):
            names = " and ".join(dict.fromkeys(result.names))
            raise _Flawed("absent-operand", f"{raw.name} has no term left under "
                          f"{under(result.names[0])}: {names} "
                          f"{'is' if len(set(result.names)) == 1 else 'are'} absent",
                          "keep a term that is always present")
        return result

    def equation(self, raw: _RawEquation):
        rhs = raw.rhs
        text = ex.to_text(rhs)
        if isinstance(rhs, ex.Call) and (rhs.func in self.blocks or rhs.func == "repeat"):
            return self.block_call(raw, rhs, text)
        if raw.instance is not None:
            raise self.error("'as' names a block call; this is not one", rhs)
        term = self.lower(rhs)
        if isinstance(term, ScalarExpr):
            raise self.error(f"{raw.name} = {text} is a dim expression, not a tensor", rhs)
        return Equation(raw.name, term, text, raw.source, self.file, raw.line)

    def block_call(self, raw: _RawEquation, call: ex.Call, text: str) -> BlockCall:
        args = list(call.args)
        count = None
        if call.kwargs:
            raise self.error("block calls take positional arguments only", call)
        if call.func == "repeat":
            if len(args) < 3:
                raise self.error("repeat(N, block, input, ...) needs a count, a block and "
                                 "at least one input", call)
            count = ex.to_sympy(args[0], self.symbols, file=self.file, what="repeat count")
            target = args[1]
            if not isinstance(target, ex.Name) or target.id not in self.blocks:
                raise self.error(f"repeat: {ex.to_text(target)!r} is not a block", target)
            block = target.id
            args = args[2:]
        else:
            block = call.func
        names = []
        for arg in args:
            if not isinstance(arg, ex.Name) or arg.id not in self.tensors:
                raise self.error(f"arguments of a block call are tensor names; "
                                 f"{ex.to_text(arg)!r} is not one (name it in an equation "
                                 "first)", arg)
            names.append(arg.id)
        return BlockCall(raw.name, block, tuple(names), raw.instance or block, count, text,
                         raw.source, self.file, raw.line)

    def lower(self, node: ex.Node):
        term = self._lower(node)
        if isinstance(term, OpNode) and not term.text:
            term = replace(term, text=ex.to_text(node))      # for the checker's messages
        return term

    def _lower(self, node: ex.Node):
        if isinstance(node, ex.Name):
            if node.id in self.tensors:
                return TensorRef(node.id, node.line, node.column)
            if node.id in self.symbols:
                return ScalarExpr(self.symbols[node.id], node.line, node.column)
            known = list(self.tensors) + list(self.symbols)
            raise self.error(f"unknown name {node.id!r}: not a tensor or dim here"
                             f"{_suggest(node.id, known)}", node)
        if isinstance(node, ex.Number):
            if isinstance(node.value, int):
                return ScalarExpr(sympy.Integer(node.value), node.line, node.column)
            exact = Fraction(node.text)
            return ScalarExpr(sympy.Rational(exact.numerator, exact.denominator), node.line,
                              node.column)
        if isinstance(node, ex.String):
            raise self.error("a string stands only as einsum's pattern", node)
        if isinstance(node, ex.Unary):
            operand = self.lower(node.operand)
            if isinstance(operand, ScalarExpr):
                return ScalarExpr(-operand.expr, node.line, node.column)
            return OpNode("neg", (operand,), (), node.line, node.column)
        if isinstance(node, ex.Binary):
            return self.binary(node)
        if isinstance(node, ex.Compare):
            raise self.error("comparisons belong in 'require' lines", node)
        if isinstance(node, ex.Call):
            return self.call(node)
        if isinstance(node, ex.Attribute):
            if node.attr != "T":
                raise self.error(f"unknown attribute .{node.attr} (only .T, the transpose of "
                                 "the last two axes)", node)
            value = self.tensor_arg(node.value, ".T")
            return OpNode("transpose", (value,), (), node.line, node.column)
        if isinstance(node, ex.Subscript):
            value = self.tensor_arg(node.value, "indexing")
            if isinstance(node.index, ex.Slice):
                # slice_rows(P, stop) for P[:n], slice_rows(P, stop, start) for P[a:b]
                bounds = [node.index.stop] + ([] if node.index.start is None
                                              else [node.index.start])
                lowered = tuple(self.lower(bound) for bound in bounds)
                if not all(isinstance(bound, ScalarExpr) for bound in lowered):
                    raise self.error("a slice [:n] or [a:b] takes dim expressions", node.index)
                return OpNode("slice_rows", (value,) + lowered, (), node.line, node.column)
            index = self.tensor_arg(node.index, "an index")
            return OpNode("gather", (value, index), (), node.line, node.column)
        raise self.error(f"unsupported expression {ex.to_text(node)!r}", node)

    def tensor_arg(self, node: ex.Node, what: str):
        term = self.lower(node)
        if isinstance(term, ScalarExpr):
            raise self.error(f"{what} needs a tensor, got the dim expression "
                             f"{ex.to_text(node)!r}", node)
        return term

    def require_small_power(self, base, exponent, node: ex.Binary) -> None:
        """A power's exponent is a number from -64 to 64 (dim expressions: 0 to 64), and a
        number raised to it stays within the digits a constant may have: ``1.5 ** 1e9``
        would otherwise be computed, exactly, for as long as it takes."""
        if not (exponent.is_number and abs(exponent) <= 64):
            raise self.error(f"{ex.to_text(node)}: exponents are numbers from -64 to 64", node)
        if base is not None and ex.too_many_digits(base, exponent):
            raise self.error(f"{ex.to_text(node)} has more than {ex.MAX_RESULT_DIGITS} digits",
                             node)

    def binary(self, node: ex.Binary):
        left, right = self.lower(node.left), self.lower(node.right)
        scalar_left, scalar_right = isinstance(left, ScalarExpr), isinstance(right, ScalarExpr)
        if scalar_left and scalar_right:
            a, b = left.expr, right.expr
            if node.op == "%":
                raise self.error("'%' belongs in constraints", node)
            if node.op == "@":
                raise self.error("'@' needs tensors", node)
            if node.op == "/" and b == 0:
                raise self.error("division by zero", node)
            if node.op == "**":
                self.require_small_power(a, b, node)
            value = {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b,
                     "/": lambda: a / b, "**": lambda: a ** b}[node.op]()
            return ScalarExpr(value, node.line, node.column)
        if node.op == "%":
            raise self.error("'%' is not defined on tensors", node)
        if node.op == "/" and scalar_right and right.expr == 0:
            raise self.error("division by zero", node)
        if node.op in ("*", "/") and (scalar_left or scalar_right) and not \
                (node.op == "/" and scalar_left):
            tensor, scalar = (right, left) if scalar_left else (left, right)
            return OpNode("scale", (tensor, scalar), (("divide", node.op == "/"),),
                          node.line, node.column)
        if node.op == "**" and not scalar_right:
            raise self.error("'**' raises a tensor to a scalar power", node)
        if node.op == "**":
            self.require_small_power(None, right.expr, node)
        return OpNode(OPERATORS[node.op], (left, right), (), node.line, node.column)

    def call(self, node: ex.Call):
        if node.func in SCALAR_FUNCTIONS:
            if len(node.args) != 1 or node.kwargs:
                raise self.error(f"{node.func}() takes one argument", node)
            arg = self.lower(node.args[0])
            if not isinstance(arg, ScalarExpr):
                raise self.error(f"{node.func}() here applies to dim expressions "
                                 "(sqrt(d_k)), not tensors", node)
            return ScalarExpr(SCALAR_FUNCTIONS[node.func](arg.expr), node.line, node.column)
        if node.func in self.blocks or node.func == "repeat":
            raise self.error(f"block {node.func} can only be called as a whole equation: "
                             f"Y = {node.func}(...)", node)
        if node.func not in FUNCTIONS:
            raise self.error(f"unknown function {node.func!r}"
                             f"{_suggest(node.func, list(FUNCTIONS) + list(SCALAR_FUNCTIONS))}",
                             node)
        op = OPS[FUNCTIONS[node.func]]
        args = list(node.args)
        attrs = dict(op.attrs)
        if op.name == "einsum":
            if not args or not isinstance(args[0], ex.String):
                raise self.error('einsum takes its pattern first: einsum("ij,jk->ik", A, B)',
                                 node)
            attrs["spec"] = args[0].value
            lowered = tuple(self.tensor_arg(a, "einsum") for a in args[1:])
            if not lowered:
                raise self.error("einsum needs at least one operand", node)
            return OpNode("einsum", lowered, tuple(sorted(attrs.items())), node.line,
                          node.column)
        if not len(op.params) - op.optional <= len(args) <= len(op.params):
            raise self.error(f"{node.func}() takes {op.arity()}, got {len(args)}", node)
        lowered = []
        for kind, arg in zip(op.params, args):
            term = self.lower(arg)
            if kind == "tensor" and isinstance(term, ScalarExpr):
                raise self.error(f"{node.func}(): {ex.to_text(arg)!r} must be a tensor", arg)
            if kind == "dim" and not isinstance(term, ScalarExpr):
                raise self.error(f"{node.func}(): {ex.to_text(arg)!r} must be a dim "
                                 "expression", arg)
            lowered.append(term)
        for key, value in node.kwargs:
            if key not in op.attrs:
                raise self.error(f"{node.func}() has no option {key!r}"
                                 f"{'; options: ' + ', '.join(op.attrs) if op.attrs else ''}",
                                 value)
            attrs[key] = self.static_int(value, f"{node.func}({key}=...)")
        return OpNode(op.name, tuple(lowered), tuple(sorted(attrs.items())), node.line,
                      node.column)

    def static_int(self, node: ex.Node, what: str) -> int:
        sign = 1
        if isinstance(node, ex.Unary):
            sign, node = -1, node.operand
        if isinstance(node, ex.Number) and isinstance(node.value, int):
            return sign * node.value
        raise self.error(f"{what} takes an integer literal", node)


def parse(text: str, file: str | None = None) -> Spec:
    """Parse spec text into a Spec (raises SpecSyntaxError / SpecError on bad input)."""
    if len(text.encode()) > MAX_SPEC_BYTES:
        raise SpecError(f"spec is {len(text.encode())} bytes; the limit is {MAX_SPEC_BYTES}",
                        file=file)
    text = text.removeprefix("\ufeff")       # a byte-order mark some editors write
    for number, line in enumerate(text.split("\n"), 1):
        for column, char in enumerate(line, 1):
            # a tab, and a carriage return ending its line (CRLF); a lone one ends a line
            # in Python, so it could carry spec text out of a comment in generated code
            if not hidden(char) or char == "\t" or char == "\r" and column == len(line):
                continue
            raise SpecSyntaxError(f"{hidden_kind(char)} U+{ord(char):04X} in the spec; specs "
                                  "are plain text", file=file, line=number, column=column)
    reader = _Reader(text, file)
    body, _ = reader.read()
    built = _Builder(reader).build(body)
    if not (built.dims or built.choices or built.blocks or built.body):
        raise SpecError("the spec is empty: it has no statements", file=file)
    built.text_hash = hashlib.sha256(text.encode()).hexdigest()
    return built


def parse_file(path: str | Path) -> Spec:
    path = Path(path)
    try:
        data = read_limited(path, MAX_SPEC_BYTES, "spec", SpecError)
        # newlines as a text file reads them: \r\n and a lone \r are \n
        text = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError as error:
        raise SpecError(f"not UTF-8 text ({error.reason} at byte {error.start})",
                        file=str(path)) from None
    except OSError as error:
        raise SpecError(f"cannot read: {error.strerror}", file=str(path)) from None
    return parse(text, str(path))
