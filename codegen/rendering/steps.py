"""Steps as lines: each step kind of the IR has a view made here (its expressions printed,
its lines broken by ``layout``) and one macro in ``templates/steps.py.j2`` that places it.

A step kind with no view or no macro is a CodegenError.
"""

from tspec.codegen import ir
from tspec.codegen.rendering import layout
from tspec.codegen.rendering.printer import Printer
from tspec.errors import CodegenError

TRACE_KEYWORDS = 256     # names a trace.update call records at most
LONG_SUM = 200          # terms a sum in generated code may chain with +; past it, sum((...))


def comment_text(comment: ir.Comment) -> str:
    shape = comment.shape.text() if comment.shape is not None else ""
    return f"{comment.before}{shape}{comment.after}"


class StepRenderer:
    """Renders steps through the macros of ``steps.py.j2`` (``macros``, the template's module)."""

    def __init__(self, printer: Printer, macros):
        self.printer = printer
        self.macros = macros

    def lines(self, steps, width: int = layout.BODY) -> list[str]:
        return [line for step in steps for line in self.step(step, width)]

    def step(self, step: ir.Step, width: int) -> list[str]:
        kind = type(step).__name__
        view = getattr(self, "_" + kind, None)
        macro = getattr(self.macros, kind, None)
        if not isinstance(step, ir.Step) or view is None or macro is None:
            raise CodegenError(f"internal error: no view or macro for the step kind {kind} "
                               "(codegen/templates/steps.py.j2); please report it")
        return str(macro(view(step, width))).splitlines()

    def call_parts(self, args, keywords) -> list[str]:
        return [self.printer(a) for a in args] + [self.printer.keyword(k) for k in keywords]

    # -- one view per step kind
    def _Assign(self, step: ir.Assign, width: int) -> dict:
        targets = ", ".join(self.printer(t) for t in step.targets)
        statement = f"{targets} = {self.printer(step.value)}"
        lines = layout.commented(statement, comment_text(step.comment), width)
        value = ir.unwrap(step.value)
        if isinstance(value, ir.Call) and any(len(line) > width for line in lines):
            # a call too long for a line (a fused norm's): its arguments on lines of their own
            lines = layout.call(f"{targets} = {self.printer.wrap(value.function, ir.ATOM)}",
                                self.printer.arguments(value), comment_text(step.comment),
                                width)
        return {"lines": lines}

    def _Evaluate(self, step: ir.Evaluate, width: int) -> dict:
        value = step.value
        if isinstance(value, ir.Call):
            return {"lines": layout.call(self.printer.wrap(value.function, ir.ATOM),
                                         self.printer.arguments(value),
                                         comment_text(step.comment), width)}
        return {"lines": layout.commented(self.printer(value), comment_text(step.comment),
                                          width)}

    def _KeepMasked(self, step: ir.KeepMasked, width: int) -> dict:
        call = f"rt.{step.helper}({self.printer(step.scores)}, {self.printer(step.mask)})"
        return {"lines": layout.commented(call, "float16: a score past its range is +inf; "
                                          "masked keys stay -inf", width)}

    def _CallBlock(self, step: ir.CallBlock, width: int) -> dict:
        return {"lines": layout.call(f"{', '.join(step.targets)} = {step.function}",
                                     self.call_parts(step.args, step.keywords),
                                     comment_text(step.comment), width)}

    def _EachMember(self, step: ir.EachMember, width: int) -> dict:
        return {"target": step.target, "xp": self.printer.alias,
                "comment": f"{step.shape.text()}: each member",
                "call": layout.call(step.call.function,
                                    self.call_parts(step.call.args, step.call.keywords), "",
                                    width - 4),
                "family": self.printer.wrap(step.family, ir.ATOM)}

    def _StackLoop(self, step: ir.StackLoop, width: int) -> dict:
        shape = step.shape.text()
        return {"first": layout.commented(f"{step.target} = {self.printer(step.start)}",
                                          shape, width),
                "instance": step.instance,
                "layers": None if step.layers is None else self.printer(step.layers),
                "call": layout.call(f"{step.target} = {step.call.function}",
                                    self.call_parts(step.call.args, step.call.keywords), shape,
                                    width - 4)}

    def _CacheUpdate(self, step: ir.CacheUpdate, width: int) -> dict:
        return {"lines": layout.commented(f'cache["{step.state}"] = {step.value}',
                                          f"next call's {step.state}: {step.shape.text()}",
                                          width)}

    def _AttentionCore(self, step: ir.AttentionCore, width: int) -> dict:
        strategy = step.strategy
        view = {"strategy": None, "steps": self.lines(step.steps, width),
                "unblocked": layout.prose(step.unblocked, width, "# ", "# ") if step.unblocked
                else []}
        if strategy is not None:
            call = strategy.call
            view["strategy"] = {
                "note": strategy.note,
                "lines": layout.call(f"return {self.printer.wrap(call.function, ir.ATOM)}",
                                     self.printer.arguments(call), strategy.shape.text(),
                                     width - 4)}
        return view

    def _Fused(self, step: ir.Fused, width: int) -> dict:
        return {"note": step.note, "fused": self.lines(step.fused, width - 4),
                "steps": self.lines(step.steps, width - 4)}

    def _MemoryGuard(self, step: ir.MemoryGuard, width: int) -> dict:
        footprint = step.footprint
        count = layout.call(footprint.function, [*footprint.arguments,
                                                 *(f"{k}={k}" for k in footprint.keywords)],
                            "", width)
        if len(count) > 1:                  # the count's call alone on the next lines
            return {"lines": [f"rt.{step.helper}(", f'    "{step.function}",',
                              "    MEMORY_LIMIT,", *layout.indented(count[:-1]),
                              f"    {count[-1]},", ")"]}
        return {"lines": list(layout.call(f"rt.{step.helper}", [
            f'"{step.function}"', "MEMORY_LIMIT", count[0]], "", width))}

    def count_lines(self, footprint: ir.Footprint, width: int) -> list[str]:
        """The body of a footprint's count function: the dims it reads, then the bytes of its
        elements (its own and the largest of its calls'), returned."""
        sizes = {"float": self.printer(footprint.itemsize), "int": str(footprint.int_bytes),
                 "bool": str(footprint.bool_bytes)}
        return self.lines(footprint.prologue, width) + layout.returned_sum(
            self.byte_tokens(footprint.own, sizes),
            [self.byte_tokens(each, sizes) for each in footprint.largest], width)

    def byte_tokens(self, counted, sizes: dict[str, str]) -> list[str]:
        """The bytes of elements by dtype class as tokens of a sum: each dtype's elements,
        times its item size, the terms after the first each starting with its sign."""
        tokens: list[str] = []
        for dtype in ("float", "int", "bool"):
            n = getattr(counted, dtype)
            if n == 0:
                continue
            terms = layout.terms(self.printer.scalar(n))
            if len(terms) > LONG_SUM:
                # a chain of thousands of + nests too deep for Python's parser: a flat tuple
                signed = [terms[0]] + [t[2:] if t[0] == "+" else "-" + t[2:] for t in terms[1:]]
                terms = [f"sum(({signed[0]},", *(t + "," for t in signed[1:-1]),
                         f"{signed[-1]}))"]
                if sizes[dtype] != "1":
                    terms[-1] += f" * {sizes[dtype]}"
            elif sizes[dtype] != "1":
                if len(terms) > 1:
                    terms[0], terms[-1] = "(" + terms[0], terms[-1] + ")"
                terms[-1] += f" * {sizes[dtype]}"
            tokens += ["+ " + terms[0] if tokens else terms[0], *terms[1:]]
        return tokens

    def _Record(self, step: ir.Record, width: int) -> dict:
        # calls of at most TRACE_KEYWORDS keywords: CPython's compiler checks a call's keywords
        # for repeats pairwise, 5 s for one call of 25,000
        calls = []
        pairs = list(zip(step.keys, step.names))
        for start in range(0, len(pairs), TRACE_KEYWORDS):
            items = ", ".join(f"{key}={name}" for key, name in pairs[start:start + TRACE_KEYWORDS])
            calls.append(layout.prose(f"rt.{step.helper}(trace, {items})", width, "", "    "))
        return {"calls": calls}

    def _Return(self, step: ir.Return, width: int) -> dict:
        return {"returned": ", ".join(step.values) or "None"}

