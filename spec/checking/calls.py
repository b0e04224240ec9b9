"""Block calls in one run: a block's inputs and local dims bound at a call, its body
checked once per binding (cached by the block's proved signature), and repeat's stacks.
"""

from dataclasses import replace

from tspec.checking.findings import Finding
from tspec.checking.scope import DECLARED, Conflict, Doubt, Scope, TensorRow
from tspec.checking.ways import choices_used, keeps_states, marked_with_ways
from tspec.errors import SpecError
from tspec.language.model import (
    Block,
    BlockCall,
    TensorDecl,
    select,
    selections,
)
from tspec.ops.base import Value, join_family
from tspec.symbolic.shape import Shape, format_expr


class Calls:
    """The run's block calls: binding a block's inputs and local dims at a call, checking
    its body once per binding (cached), and a stack's repeat."""

    # -- block calls
    def check_call(self, scope: Scope, call: BlockCall, declared: TensorDecl | None) -> None:
        scope.equation = call
        block = self.spec.blocks[call.block]
        if len(call.args) != len(block.inputs):
            raise SpecError(f"block {block.name} takes {len(block.inputs)} input"
                            f"{'s' if len(block.inputs) != 1 else ''} "
                            f"({', '.join(d.name for d in block.inputs)}), got "
                            f"{len(call.args)}", file=call.file, line=call.line)
        locals_ = {d.symbol for d in block.local_dims.values()}
        binding: dict = {}
        actuals = []
        for arg in call.args:
            value = scope.values[arg]
            if value.shape is None:
                raise SpecError(f"{arg} has no stated shape and cannot be passed to block "
                                f"{block.name}", file=call.file, line=call.line)
            actuals.append(scope.shape(value, 1, "argument"))
        # a block that takes single tensors, called with families, applies to each member
        mapped = None
        if all(d.shape.family is None for d in block.inputs) and \
                any(a.family is not None for a in actuals):
            if call.repeat is not None or keeps_states(self.spec, block.name):
                arg = next(a for a, s in zip(call.args, actuals) if s.family is not None)
                raise SpecError(f"{arg} is a family passed to {block.name}, which takes one "
                                "tensor: code generation applies a block to each member only "
                                "where it is called once and keeps no states",
                                file=call.file, line=call.line)
            mapped = join_family(scope, *(a.family for a in actuals))
            actuals = [Shape(a.dims) for a in actuals]
        bound_by: dict = {}       # local dim -> the argument and input that bound it
        doubts: dict = {}         # block input -> its doubt, where the argument does not fit
        conflicts: list = []      # local dims two arguments disagree on (see bind)
        for decl, arg, actual in zip(block.inputs, call.args, actuals):
            self.bind(scope, call, block, decl, arg, actual, scope.values[arg].dtype, binding,
                      locals_, bound_by, doubts, conflicts)
        unbound = [d.name for d in block.local_dims.values() if d.symbol not in binding]
        if unbound:
            raise SpecError(f"block {block.name}: local dim{'s' if len(unbound) > 1 else ''} "
                            f"{', '.join(unbound)} {'are' if len(unbound) > 1 else 'is'} not "
                            "fixed by its inputs' shapes", file=block.file, line=block.line)
        path = f"{scope.prefix}{call.instance}{'[i]' if call.repeat is not None else ''}."
        relevant = choices_used(self.spec, block.name)
        ways_key = (block.name, id(block),
                    tuple((c, self.choices.get(c)) for c in relevant))
        ways = self.memo.ways.get(ways_key)
        if ways is None:
            ways = self.memo.ways[ways_key] = selections(self.spec, block.name, self.choices)
        if ways == [{}]:
            self.call_block(scope, call, block, binding, mapped, path, declared, doubts,
                            conflicts)
            return
        # the block consults choices the caller left open: it is checked under each way of
        # setting them, its findings marked with the way; the caller goes on from the declared
        # shape, the same under all of them (a call with no declared shape leaves none open)
        outer, want_rows = self.choices, self.want_rows
        # what each way adds for the decoding pass and the unstated shapes, as it adds it
        added: list[tuple[list, int, list]] = [(self.pending, 4, []), (self.states, 3, []),
                                               (self.starts, 3, [])]
        firsts = [len(kept) for kept, _, _ in added]
        for index, way in enumerate(ways):
            self.choices, self.want_rows = outer | way, want_rows and index == 0
            start, rows_start = len(self.findings), len(scope.rows)
            self.call_block(scope, call, block, binding, mapped, path, declared, doubts,
                            conflicts)
            self.findings[start:] = [replace(f, selection=way | f.selection)
                                     for f in self.findings[start:]]
            for (kept, _, by_way), first in zip(added, firsts):
                by_way.append(kept[first:])
                del kept[first:]
            if index:
                del scope.rows[rows_start:]
        self.choices, self.want_rows = outer, want_rows
        for kept, at, by_way in added:
            # a state is told apart by the choices its block reads (which set whether the
            # block writes it: see ``_unwritten_states``), even where it is kept alike
            apart = (lambda entry, way: tuple((c, way[c]) for c in self.state_choices.get(
                id(entry[1]), ()) if c in way)) if kept is self.states else None
            kept.extend(marked_with_ways(by_way, ways, at, apart))

    def call_block(self, scope: Scope, call: BlockCall, block: Block, binding: dict,
                   mapped, path: str, declared: TensorDecl | None, doubts: dict,
                   conflicts: list) -> None:
        """Check a call of a block whose choices are all set: its body, then its output
        against the declared shape (which later equations go on from: the same under every
        way of setting the choices the block consults).

        Where two arguments disagree on a local dim (``conflicts``), the body is checked
        again with the later one's value: the states and starts that differ so are doubtful,
        for the argument-mismatch (see ``alternatives``)."""
        kept = len(self.states), len(self.starts)
        output, rows, suspect = self.check_block(block, binding, path, doubts)
        scope.rows.extend(rows)
        if conflicts:
            with self.aside(scope):
                again = len(self.states), len(self.starts)
                try:
                    self.check_block(block, binding | {local: given for local, given, _ in
                                                       conflicts}, path, {})
                    otherwise = self.states[again[0]:], self.starts[again[1]:]
                except SpecError:
                    otherwise = None
            if otherwise is not None:
                self.alternatives(*kept, *otherwise, conflicts[0][2])
        body = len(self.findings)
        self.finish_call(scope, call, block, binding, mapped, declared, output)
        if suspect is None:
            return
        # the block's output is doubtful (an equation inside gave what its claim did not):
        # what the call finds about it follows from that finding when the declared output
        # would have given none
        found = self.findings[body:]
        if found:
            with self.aside(scope):
                alternative = len(self.findings)
                self.finish_call(scope, call, block, binding, mapped, declared, suspect.other)
                clean = len(self.findings) == alternative
            if clean:
                for finding in found:
                    if finding.cause is None:
                        finding.cause = suspect.cause
        if declared is None or declared.shape is None:
            scope.suspect.setdefault(call.output, suspect._replace(
                other=replace(suspect.other, tensor=call.output)))

    def finish_call(self, scope: Scope, call: BlockCall, block: Block, binding: dict,
                    mapped, declared: TensorDecl | None, output: Value) -> None:
        """A call's output: mapped over families, fed back by a repeat, compared with the
        claim."""
        if mapped is not None and output.shape is not None:
            output = Value(Shape(output.shape.dims, mapped), output.dtype, tensor=output.tensor)
        if call.repeat is not None:
            first = block.inputs[0].shape.subs(binding)
            if output.shape is not None and output.shape.rank == first.rank:
                verdict = self.prover.equal_all(list(zip(output.shape.dims, first.dims)))
                before = len(self.findings)
                if not verdict.proved:
                    scope.finding("repeat-mismatch",
                                  f"repeat({format_expr(call.repeat)}, {block.name}) feeds each "
                                  f"copy's output {block.output} ({output.shape.text()}) to the "
                                  f"next copy's input {block.inputs[0].name} ({first.text()})",
                                  verdict, list(output.shape.dims) + list(first.dims),
                                  hint="a repeated block must return the shape of its first "
                                       "input")
                # the next copy's input is a use of the block's first input
                self.used(block.inputs[0], call,
                          self.findings[-1].key() if len(self.findings) > before else None)
            elif output.shape is not None:
                scope.finding("repeat-mismatch", f"repeat({format_expr(call.repeat)}, "
                              f"{block.name}) returns rank {output.shape.rank} but takes rank "
                              f"{first.rank}", None, [],
                              hint="a repeated block must return the shape of its first input")
        self.compare(scope, call, declared, output)

    def bind(self, scope, call, block, decl, arg, actual: Shape, dtype, binding, locals_,
             bound_by, doubts, conflicts):
        # a call is a use of the block's input, and of the argument where it is declared
        given = scope.decls.get(arg)
        given = given if given is not None and given.role in DECLARED and \
            given.shape is not None and \
            (scope.block is None or given not in scope.block.inputs) else None

        def used(failed):
            self.used(decl, call, failed)
            if given is not None:
                self.used(given, call, failed)

        declared = decl.shape
        expected = declared.subs(binding)
        problem = None
        if declared.rank != actual.rank:
            problem = f"rank {actual.rank} where the block takes rank {declared.rank}"
        elif declared.family is None and actual.family is not None:
            problem = "a family where the block takes one tensor"
        if problem is None:
            pairs, written = [], []
            for d, a in zip(declared.dims, actual.dims):
                bound = d.xreplace(binding)
                if bound in locals_:
                    binding[bound] = a
                    bound_by[bound] = (arg, decl.name, actual)
                else:
                    pairs.append((bound, a))
                    written.append(d)
            if declared.family is not None and actual.family is not None:
                pairs.append((declared.family.xreplace(binding), actual.family))
            if any(e.free_symbols & locals_ for pair in pairs for e in pair):
                raise SpecError(f"block {block.name}: input {decl.name}'s shape uses a local "
                                "dim in an expression before it is bound; bind it alone first",
                                file=block.file, line=decl.line)
            verdict = self.prover.equal_all(pairs) if pairs else None
            if verdict is not None and not verdict.proved:
                expected = declared.subs(binding)
                # a local dim an earlier argument bound, which this one gives otherwise: the
                # two arguments disagree, and either may be the one not meant
                disagreeing = [(local, b, a) for local, (b, a) in zip(written, pairs)
                               if local in bound_by and not self.prover.equal(b, a).proved]
                conflict = disagreeing[0] if disagreeing else None
                if conflict is None:
                    message = (f"{arg} ({actual.text()}) passed as {block.name}'s input "
                               f"{decl.name} ({expected.text()})")
                    hint = (f"pass a tensor of shape {expected.text()}, or check "
                            f"{block.name}'s declaration of {decl.name} (line {decl.line})")
                else:
                    # neither argument is known to be the one not meant: both are named,
                    # and neither shape is "expected"
                    local, earlier, later = conflict
                    other, other_input, other_shape = bound_by[local]
                    message = (f"{block.name}'s inputs {other_input} and {decl.name} disagree "
                               f"on {local}: {other} ({other_shape.text()}), passed as "
                               f"{other_input}, gives {local} = {format_expr(earlier)}, but "
                               f"{arg} ({actual.text()}), passed as {decl.name}, gives "
                               f"{local} = {format_expr(later)}")
                    hint = (f"{block.name}'s inputs {other_input} and {decl.name} share "
                            f"{local}: pass {other} and {arg} with one {local}, or check "
                            "which of them is not the tensor meant")
                scope.finding("argument-mismatch", message, verdict,
                              [e for pair in pairs for e in pair], hint=hint,
                              expected=None if conflict else expected.text(),
                              inferred=None if conflict else actual.text())
                if conflict is not None:
                    # the body is checked again with every local dim this argument gives
                    # otherwise (see call_block): T_q and T_kv both, where a call swaps its
                    # query and key-value arguments
                    conflicts += [(dim, given, self.findings[-1].key())
                                  for dim, _, given in disagreeing]
                    self.memo.conflicts[self.findings[-1].key()] = Conflict(
                        bound_by[local][0], arg, local, later)
                used(self.findings[-1].key())
                # in the body, the input is doubtful: what trips over it there but not over
                # the argument passed follows from this finding
                doubts[decl.name] = Doubt(Value(actual, dtype, tensor=decl.name),
                                           self.findings[-1].key(), False, decl.name)
            else:
                used(None)
        else:
            for d, a in zip(declared.dims, actual.dims):
                if d in locals_ and d not in binding:
                    binding[d] = a
            scope.finding("argument-mismatch", f"{arg} ({actual.text()}) passed as "
                          f"{block.name}'s input {decl.name} ({declared.text()}): {problem}",
                          None, [], hint=f"pass a tensor of shape {declared.text()}",
                          expected=declared.text(), inferred=actual.text())
            used(self.findings[-1].key())
        if dtype != decl.dtype:
            scope.finding("argument-mismatch", f"{arg} is {dtype} but {block.name}'s input "
                          f"{decl.name} is {decl.dtype}", None, [],
                          hint=f"pass a {decl.dtype} tensor")

    def check_block(self, block: Block, binding: dict, path: str,
                    doubts: dict) -> tuple[Value, list, tuple]:
        relevant = choices_used(self.spec, block.name)
        key = (block.name, id(block), tuple(sorted(((k.name, v) for k, v in binding.items()),
                                        key=lambda kv: kv[0])),
               self.prover_key, tuple((c, self.choices.get(c)) for c in relevant),
               tuple(sorted(doubts.items())))
        cached = self.block_cache.get(key)
        if cached is None:
            if block.name in self.active:
                cycle = self.active[self.active.index(block.name):] + [block.name]
                raise SpecError(f"block {block.name} calls itself: {' -> '.join(cycle)}",
                                file=block.file, line=block.line)
            self.active.append(block.name)
            inner = Scope(self, "", binding, block)
            inner.suspect.update(doubts)
            start, pending_start = len(self.findings), len(self.pending)
            states_start, starts_start = len(self.states), len(self.starts)
            known = set(self.unknowns)
            self.check_body(inner, select(block.body, self.choices), block.inputs,
                            [block.output], f"block {block.name}")
            value = inner.values[block.output]
            pinned = {k: v for k, v in self.unknowns.items() if k not in known}
            cached = (value, self.findings[start:], inner.rows, self.pending[pending_start:],
                      pinned, self.states[states_start:], self.starts[starts_start:],
                      inner.suspect.get(block.output))
            del self.findings[start:]
            del self.pending[pending_start:]
            del self.states[states_start:]
            del self.starts[starts_start:]
            self.block_cache[key] = cached
            self.active.pop()
        value, findings, rows, pending, pinned, states, starts, suspect = cached
        self.unknowns.update(pinned)
        self.pending.extend((path + name, decl, shape, like, selection)
                            for name, decl, shape, like, selection in pending)
        self.states.extend((path + entry[0],) + entry[1:] for entry in states)
        self.starts.extend((path + entry[0],) + entry[1:] for entry in starts)
        for finding in findings:
            copy = Finding(**finding.__dict__)
            copy.tensor = path + finding.tensor if finding.tensor else finding.tensor
            self.findings.append(copy)
        if not self.want_rows:
            return value, [], suspect
        return value, [TensorRow(**{**row.__dict__, "name": path + row.name}) for row in rows], \
            suspect
