"""Reading: a spec's text, line by line, into raw statements.

Owns the logical lines (tokens grouped into lines, indented bodies nested under the line that
opens them), the raw records of statements whose names are not resolved yet (``RawEquation``,
``RawOptional``, ``RawFrom``, ``RawFlaw``; a declaration, a `let` or a `require` is a tuple)
and ``Reader``, which reads each statement and refuses what is malformed where it stands.
Notes, `reused`, `when`, `update`, `rename` and `output` it reads as model records already, and
it keeps the spec's name, title, dims, choices, blocks and outputs. It hands the raw statements
and itself to ``building``.
"""

import itertools
from dataclasses import dataclass

from tspec.errors import SpecError, SpecSyntaxError
from tspec.language.model import Choice, Note, Output, Rename, Reused, Update, When
from tspec.language.names import check_name
from tspec.ops.catalogue import FUNCTIONS, OPS, SCALAR_FUNCTIONS
from tspec.symbolic import expr as ex
from tspec.symbolic.shape import DTYPES, Dim, dim_symbol

MAX_NESTING = 32          # levels of block / when bodies


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
class RawEquation:
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
class RawOptional:
    """A declaration ending in ``if CONDITION``: present only where the condition holds."""
    decl: tuple
    conditions: list            # (choice, options, negated), as `when` reads them
    line: int


@dataclass
class RawFrom:
    """``from BLOCK with NAME = VALUE, ...``, first in a block body."""
    parent: str
    bindings: list              # (name, value node, line, column)
    line: int
    column: int


@dataclass
class RawFlaw:
    """A statement that cannot stand where selection puts it (see ``model.Flaw``): with the
    equation it stands for, whose declared shape the tensor keeps, or none."""
    kind: str
    message: str
    equation: "RawEquation | None"
    line: int
    hint: str = ""


class Reader:
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
            if isinstance(record, RawFrom) and out:
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
        return RawFrom(parent.text, bindings, token.line, token.column)

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
            return RawOptional(("decl", role, parts), conditions, line)
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
        return RawEquation(name, family, shape, dtype, meaning, rhs, instance, self.source,
                           line, token.column)
