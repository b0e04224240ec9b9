"""Building: the raw statements ``reading`` made, into the model's records.

Owns ``Builder``, which resolves the names of each scope (the model, each block), expands a
block's `from` (the parent's statements, bound, with the block's own), gives each declaration
its shape and each `let` and `require` its dim expression, checks `reused`, `rename` and `when`
against what the spec declares, and bounds what the choices' expansions make; each equation it
hands to ``terms.Lowering``. It hands the ``Spec`` on to ``parser.parse``.
"""

import hashlib
from dataclasses import replace
from pathlib import Path

from tspec.errors import LimitError, SpecError, TspecError
from tspec.language.model import (
    Block,
    BlockCall,
    Constraint,
    Equation,
    Flaw,
    Let,
    Note,
    Output,
    Rename,
    Reused,
    Spec,
    TensorDecl,
    Update,
    When,
    every_record,
    require_function_names,
)
from tspec.language.names import did_you_mean
from tspec.language.reading import RawEquation, RawFlaw, RawFrom, RawOptional, Reader
from tspec.language.terms import MAX_WAYS, Lowering, chain
from tspec.ops.catalogue import FUNCTIONS, OPS, SCALAR_FUNCTIONS
from tspec.symbolic import expr as ex
from tspec.symbolic.shape import parse_shape

MAX_EXPANDED = 1_000_000  # statements all the expansions over the choices make together


class Builder:
    """Turns raw statements into model records, resolving names in each scope."""

    def __init__(self, reader: Reader):
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
        if not body or not isinstance(body[0], RawFrom):
            expanded[name] = (body, local)
            return expanded[name]
        start = body[0]
        if start.parent not in self.r.blocks:
            raise self.error(f"from: unknown block {start.parent!r}"
                             f"{did_you_mean(start.parent, self.r.blocks)}", start.line,
                             start.column)
        if start.parent == name or start.parent in active:
            cycle = active[active.index(start.parent):] if start.parent in active else ()
            raise self.error(f"block {name} starts from itself: "
                             f"{' -> '.join(cycle + (name, start.parent))}", start.line,
                             start.column)
        parent_body, parent_local = self.expand(start.parent, expanded, active + (name,))
        expanded[name] = self.inherit(name, start, body[1:], parent_body, parent_local)
        return expanded[name]

    def inherit(self, name: str, start: RawFrom, own: list, parent_body: list,
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
                flaws.append(RawFlaw("unknown-binding", f"{parent} has no input or local dim "
                                     f"{key} to bind; it has {', '.join(known)}", None, line,
                                     f"bind one of those{did_you_mean(key, known)}"))
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
        flawed: dict[int, RawFlaw] = {}

        def inherited(s):
            if id(s) not in copies:
                copies[id(s)] = self.bound(s, bound)
            return copies[id(s)]

        def overrides_nothing(s: RawEquation) -> RawFlaw:
            if id(s) not in flawed:
                where = " or ".join(" and ".join(f"{c}={'|'.join(o)}" for c, o in path)
                                    for path in self.paths(parent_body, s.name))
                flawed[id(s)] = RawFlaw(
                    "unknown-override", f"{s.name} overrides nothing here: {parent} computes "
                    f"{s.name} only under {where}", s, s.line,
                    f"put this equation under the choices {parent} computes {s.name} under, or "
                    "give it a name of its own")
            return flawed[id(s)]

        def merged(theirs: list, mine: list) -> list:
            here = {s.name for s in theirs if isinstance(s, RawEquation)}
            ahead: dict[str, tuple[list, RawEquation]] = {}
            pending: list = []
            for s in mine:
                if isinstance(s, RawEquation) and s.name in here and s.name not in ahead:
                    ahead[s.name] = (pending, s)
                    pending = []
                elif isinstance(s, RawEquation) and s.name in computed - here:
                    pending.append(overrides_nothing(s))
                else:
                    pending.append(s)
            out: list = []
            for s in theirs:
                if isinstance(s, RawEquation) and s.name in ahead:
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
            return chain(open_, [(o, tree(chosen | {open_: o}))
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
            elif isinstance(s, RawEquation) and s.name == name:
                found.append([])
        return found

    def bound(self, s, names: dict):
        """A raw statement of a parent block with its inputs and local dims bound."""
        if not names:
            return s
        if isinstance(s, tuple) and s[0] == "decl":
            return ("decl", s[1], self.bound_parts(s[2], names), *s[3:])
        if isinstance(s, RawOptional):
            return replace(s, decl=self.bound(s.decl, names))
        if isinstance(s, RawEquation):
            return replace(s, family=None if s.family is None else ex.renamed(s.family, names),
                           shape=self.bound_shape(s.shape, names),
                           rhs=ex.renamed(s.rhs, names))
        if isinstance(s, Update):
            return Update(*(_bound_name(n, names) for n in (s.state, s.value)), s.file, s.line)
        if isinstance(s, RawFlaw) and s.equation is not None:
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
                raise self.error(f"rename: unknown block {s.block!r}"
                                 f"{did_you_mean(s.block, blocks)}", s.line)
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
                                     f"{s.block}{did_you_mean(old, sorted(names))}", s.line)
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
                                         f"op of this spec{did_you_mean(name, known)}", s.line)

    def check_when(self, when: When, word: str = "when") -> None:
        choice = self.r.choices.get(when.choice)
        if choice is None:
            raise self.error(f"'{word}' names unknown choice {when.choice!r}"
                             f"{did_you_mean(when.choice, self.r.choices)}", when.line)
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
            elif isinstance(s, RawEquation) and s.instance in tensors:
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
                if isinstance(s, RawOptional):
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
                elif isinstance(s, RawEquation):
                    tensors.setdefault(s.name, s.line)
                elif isinstance(s, RawFlaw) and s.equation is not None:
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
        lowering = Lowering(self.file, symbols, set(tensors), blocks, self.r.choices,
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

        def declared(s: RawEquation) -> TensorDecl:
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
            if isinstance(s, RawOptional):
                nested = records(s.decl)
                for choice, options in reversed(optional[s.decl[2][0]][0]):
                    nested = [When(choice, options, nested, [], self.file, s.line)]
                return nested
            if isinstance(s, Update):
                for name in (s.state, s.value):
                    if name not in tensors:
                        raise self.error(f"update: {name!r} is not a tensor of {where}"
                                         f"{did_you_mean(name, tensors)}", s.line)
                return [s]
            if isinstance(s, tuple) and s[0] == "let":
                _, name, node, line = s
                if name not in symbols:
                    raise self.error(f"let: unknown dim {name!r}{did_you_mean(name, symbols)}",
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
            if isinstance(s, RawEquation):
                return [declared(s), *lowering.variants(s)]
            if isinstance(s, RawFlaw):
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
                                 f"{did_you_mean(name, tensors)}", None)
        return records_


def _raw_names(statements: list, equations_only: bool = False) -> list[str]:
    """The tensors raw statements declare or compute, in every branch."""
    found = []
    for s in statements:
        if isinstance(s, When):
            found += _raw_names(s.body, equations_only) + _raw_names(s.otherwise, equations_only)
        elif isinstance(s, RawEquation):
            found.append(s.name)
        elif equations_only:
            continue
        elif isinstance(s, tuple) and s[0] == "decl":
            found.append(s[2][0])
        elif isinstance(s, RawOptional):
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
