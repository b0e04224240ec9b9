"""Weighing findings after every run: which of a tensor's uses or its declaration is the
likelier mistake, what later equations say of a refuted claim, and the findings grouped.
"""

from collections.abc import Iterable

from tspec.checking.claims import declaration
from tspec.checking.findings import Finding, grouped
from tspec.checking.prove import Prover
from tspec.checking.scope import Uses
from tspec.language.model import (
    BlockCall,
    TensorDecl,
    When,
)
from tspec.symbolic.shape import format_expr


def settles(claim: tuple, relation) -> bool:
    """Whether adding ``relation`` as a constraint proves a failed claim, ``(prover,
    (method, *arguments))``."""
    prover, (method, *arguments) = claim
    added = Prover(prover.dims, prover.constraints + [relation], prover.lets, prover.values)
    try:
        return getattr(added, method)(*arguments).proved
    except TypeError:       # as offers(): no proof this way
        return False


def declares(statements: list, decl: TensorDecl) -> bool:
    """Whether a body holds the declaration, in any branch."""
    return any(s is decl or isinstance(s, When) and
               (declares(s.body, decl) or declares(s.otherwise, decl)) for s in statements)


def calls_in(statements: list) -> set[str]:
    """The blocks a body calls, in any branch."""
    found: set[str] = set()
    for s in statements:
        if isinstance(s, BlockCall):
            found.add(s.block)
        elif isinstance(s, When):
            found |= calls_in(s.body) | calls_in(s.otherwise)
    return found


def place(finding: Finding) -> tuple:
    """Where a finding is, for ordering: file, line, kind, tensor."""
    return (finding.file or "", finding.line or 0, finding.kind, finding.tensor)


def weighed_hint(finding: Finding, said: tuple[str, set]) -> str:
    """A refuted claim's hint (declare it as the equation gives, or fix the equation), with
    what later equations say: they fit the claim alone, or what the equation gives alone.
    (Evidence, not a verdict: a seed can be wrong the same way twice.)"""
    hint = finding.hint
    if finding.kind != "shape-mismatch" or not hint.endswith(", or fix the equation"):
        return hint
    name = finding.equation.split(" = ", 1)[0]
    fits, lines = said
    where = f"line {next(iter(lines))} uses" if len(lines) == 1 else \
        f"lines {', '.join(map(str, sorted(lines)))} use"
    if fits == "claim":
        return f"{hint}; {where} {name} as declared"
    return f"{hint}; {where} what its equation gives"


def misfits(uses: Iterable[Uses], merged: dict, causes: set,
             inputs: set) -> list[tuple[TensorDecl, list[tuple], list]]:
    """The declared tensors whose declaration is the likelier mistake than each use that does
    not fit it, each with the keys of those uses' findings and the lines of the uses that fit:

    - one that none of its uses fits, at two or more lines (with one, the use may as well
      be the mistake: that finding stands alone);
    - a block's input that none of its calls fits, at one line, where its body trips over
      it (``inputs``, the ids of blocks' inputs);
    - one that uses at two or more lines do not fit, though others do (a table too short for
      two of its slices, E.T where E's rows are not the vocabulary's: a gather or a slice
      that fits need not compare all of it).

    Only findings that follow from no other count: a use that trips over a tensor an earlier
    finding made doubtful says nothing of the declaration. And only those that blame no
    other such declaration (in X @ W where neither fits any use, either may be the mistake),
    for one that some use fits, no other declaration at all."""
    uses = [(use.decl, sorted({line for record, line in use.fits.items()
                               if record not in use.fails and line is not None}),
             list(dict.fromkeys(k for ks in use.fails.values() for k in ks)))
            for use in uses]
    owners: dict = {}         # finding key -> the declarations it blames: (all, fitting none)
    for _, fits, keys in uses:
        for key in keys:
            every, unfit = owners.get(key, (0, 0))
            owners[key] = (every + 1, unfit + (not fits))
    found = []
    for decl, fits, keys in uses:
        keys = [k for k in keys if k in merged and k in causes and
                owners[k][1 if not fits else 0] == 1]
        lines = {merged[k].line for k in keys}
        if id(decl) in inputs and not fits:
            # a block's input its calls do not fit, whose body trips over it where the
            # argument would not (the findings that follow from the calls'): the body's uses
            # are uses too
            lines |= {f.line for f in merged.values() if f.cause in keys}
        if len(lines) >= 2:
            found.append((decl, keys, fits))
    return found


def misfit_declaration(decl: TensorDecl, failed: list[Finding], fits: list,
                        inside: list) -> Finding:
    """A declared tensor that uses at two or more lines do not fit (see ``misfits``; a
    block's input, the lines ``inside`` its body that trip over it too): its declaration is
    the likelier mistake than each use, and their findings follow from it. (With one use,
    the use may as well be the mistake: that finding stands alone.)"""
    at = sorted({f.line for f in failed if f.line is not None})
    lines = f"line{'s' if len(at) > 1 else ''} {', '.join(map(str, at))}"
    if inside:
        lines += f"; in its block, line{'s' if len(inside) > 1 else ''} " + \
            ", ".join(map(str, inside))
    family = "" if decl.shape.family is None else f"[{format_expr(decl.shape.family)}]"
    first = min(failed, key=lambda f: (f.line or 0, f.kind, f.tensor))
    which = f"which none of its uses fits ({lines})" if not fits else \
        f"which its uses at {lines} do not fit (it fits those at " \
        f"line{'s' if len(fits) > 1 else ''} {', '.join(map(str, fits))})"
    return Finding(
        kind="declaration-mismatch",
        message=f"{decl.name} is declared {decl.shape.text()}, {which}",
        file=decl.file, line=decl.line,
        equation=f'{decl.role} {decl.name}{family} "{declaration(decl.shape)}"',
        hint=f"declare {decl.name} with the shape its uses need, or fix them; the first, at "
             f"line {first.line}: {first.message}")


def grouped_findings(findings: list[Finding], merged: dict, causes: set) -> list[Finding]:
    """Each finding linked to the earlier finding it follows from (``caused_by``), then in
    order: every cause, each followed by what follows from it.

    A finding follows from another when its only reason is that one's tensor (``cause``, see
    ``Run.follows``), or when it is about the same statement (the same line: a block checked
    at other sizes, a claim refuted after its operands were)."""
    for finding in findings:
        cause = merged.get(finding.cause) if finding.key() not in causes else None
        finding.caused_by = cause if cause is not finding else None
        finding.cause = None
    for finding in findings:
        # a chain that comes back to this finding (choices that disagree) is no cause
        seen, step = {id(finding)}, finding.caused_by
        while step is not None and id(step) not in seen:
            seen.add(id(step))
            step = step.caused_by
        if step is not None:
            finding.caused_by = None
    # the same statement's other findings follow from what one of them follows from, else
    # from the first of them
    first: dict = {}
    for finding in findings:
        where = (finding.file, finding.line)
        if finding.caused_by is not None and not isinstance(first.get(where), tuple):
            first[where] = (finding.caused_by,)
        first.setdefault(where, finding)
    for finding in findings:
        anchor = first[(finding.file, finding.line)]
        anchor = anchor[0] if isinstance(anchor, tuple) else anchor
        if finding.caused_by is None and anchor is not finding:
            finding.caused_by = anchor
    return [f for cause, rest in grouped(findings) for f in (cause, *rest)]
