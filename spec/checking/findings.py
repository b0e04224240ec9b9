"""Findings: what the checker reports about a well-formed spec, and how they are shown.

A finding is a record, never an exception: the checker collects all of them. Each names the
spec file and line, the equation, the tensor, expected vs inferred shape, a counterexample (the
smallest sizes allowed by the constraints that break the claim), the dim values involved, and a
hint for the fix.
"""

import json
import os
from dataclasses import dataclass, field, fields
from fractions import Fraction

from tspec.numbers import shown_json, value_text

# Every kind of finding, with what it means. Tests pin one message per kind.
KINDS = {
    "shape-mismatch": "an equation's declared shape differs from the shape its ops produce",
    "dtype-mismatch": "an equation's declared dtype differs from the dtype its ops produce",
    "operand-mismatch": "an op's operands do not fit together (matmul inner dims, broadcasting)",
    "argument-mismatch": "a block call passes a tensor whose shape differs from the block input",
    "declaration-mismatch": "a declared tensor's shape fits none of its uses (two or more, "
                            "reported beneath it)",
    "repeat-mismatch": "a repeated block's output cannot feed its next copy",
    "not-divisible": "an op needs one dim to divide another (heads, rotary's feature pairs)",
    "not-integral": "a derived dim is not a whole number for every allowed size",
    "out-of-range": "an op needs one size not to exceed another (positions vs table length)",
    "unproved": "a claim neither proved nor refuted by a counterexample",
    "unstated-shape": "a parameter's or input's shape is unstated: what its source implies "
                      "(or its uses need) is reported",
    "name-reused": "the source uses one name for different things (the spec names each)",
    "constraint-violated": "a variant's dim values break a constraint",
    "unused-dim": "a variant (or --set) gives a dim a value that nothing under its choices "
                  "uses: the choice that would use it is named",
    "unused-choice": "a variant (or --set) sets a choice to an option no `when` under its other "
                     "choices consults: the choice that would is named",
    "unused-setting": "a variant (or --set) gives a run-time setting (eps, theta, ...) that no "
                      "op the choices apply reads",
    "missing-dim": "a variant's choices use a dim that has no value, and none that tspec run "
                   "gives",
    "unsatisfiable": "no sizes meet every constraint, so every claim would hold vacuously",
    "decoding-mismatch": "a decoding step does not fit the full model that starts it: a state "
                         "kept outside the step or started from a tensor the full model lacks, "
                         "or a step input the full model does not take",
    "absent-operand": "a tensor absent under some options (declared with `if`) is read where "
                      "only a term of + or - may be absent",
    "not-an-op": "a choice called as a function (`activation(X)`) has an option that names "
                 "no activation op",
    "unknown-override": "an equation of a block built `from` another replaces nothing: the "
                        "other computes that tensor only under other choices",
    "unknown-binding": "`from BLOCK with NAME = ...` binds a name that is neither an input nor "
                       "a local dim of BLOCK",
}


def format_value(value) -> str:
    return value_text(value)


@dataclass
class Finding:
    kind: str
    message: str
    file: str | None = None
    line: int | None = None
    equation: str = ""
    tensor: str = ""
    expected: str | None = None
    inferred: str | None = None
    counterexample: dict | None = None
    dims: dict = field(default_factory=dict)
    hint: str = ""
    scope: str = "all sizes"             # 'all sizes' (the proof) or 'variant' (given values)
    choices: str = ""                    # which choice combinations show it
    # the checker's own record of the choices it saw the finding under, before ``choices``
    # describes the combinations; not part of the finding's text or data
    selection: dict = field(default_factory=dict, repr=False, compare=False)
    # exactly the combinations of choices checked that show it (a checking.coverage.Cover:
    # ``in``, ``len``, iteration, ``describe``), where ``choices`` says it in words
    combinations: object = field(default=None, repr=False, compare=False)
    # the earlier finding this one follows from (its tensor's shape is what this one trips
    # over, or it is the same statement's mistake seen again), or None for a cause; while
    # checking, the checker holds that finding's key in ``cause``
    caused_by: "Finding | None" = field(default=None, repr=False, compare=False)
    cause: tuple | None = field(default=None, repr=False, compare=False)
    # the constraint the hint suggests adding (a sympy relation), None when it suggests none
    suggested: object = field(default=None, repr=False, compare=False)
    # the declaration the hint suggests changing and the shape it suggests, (TensorDecl,
    # Shape), None when it suggests none: the checker offers it only where it fixes the
    # finding and moves it nowhere else
    redeclare: object = field(default=None, repr=False, compare=False)
    # declarations of the tensors the equation reads whose shape gives what it does not
    # claim, each with the shape that would give the claim, [(TensorDecl, Shape)]: the hint
    # names them and their lines, and offers the first that fixes the finding
    operands: list = field(default_factory=list, repr=False, compare=False)
    # the claim that failed, where a constraint could settle it: (the Prover it was judged
    # by, (method, *arguments)); a constraint another finding suggests that proves it makes
    # this finding follow from that one
    claim: object = field(default=None, repr=False, compare=False)

    def key(self) -> tuple:
        return (self.kind, self.file, self.line, self.message, self.expected, self.inferred,
                self.scope)

    @property
    def where(self) -> str:
        if self.file is None:
            return "<spec>"
        file = display_path(self.file)
        return f"{file}:{self.line}" if self.line is not None else file

    def details(self) -> list[tuple[str, str]]:
        """The finding's facts as (label, text) pairs, in the order they are shown."""
        facts = [("equation", self.equation), ("tensor", self.tensor),
                 ("expected", self.expected), ("inferred", self.inferred),
                 ("counterexample", _pairs(self.counterexample or {})),
                 ("dims", _pairs(self.dims)), ("choices", self.choices), ("hint", self.hint)]
        return [(label, text) for label, text in facts if text]

    def text(self) -> str:
        lines = [f"{self.where}: {self.kind}: {self.message}"]
        lines += [f"    {label}: {text}" for label, text in self.details()]
        return "\n".join(lines)

    def as_dict(self) -> dict:
        """The finding as data; ``findings_data`` adds the ``caused_by`` link."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.repr}
        for name in ("counterexample", "dims"):
            if data[name] is not None:
                data[name] = {k: (format_value(v) if isinstance(v, Fraction) else v)
                              for k, v in data[name].items()}
        return data


def grouped(findings: list[Finding]) -> list[tuple[Finding, list[Finding]]]:
    """Each finding that follows from no other listed one, in order, with the findings that
    follow from it (through any chain of causes), in order."""
    listed = {id(f) for f in findings}

    def root(finding: Finding) -> Finding:
        for _ in range(len(findings)):
            cause = finding.caused_by
            if cause is None or id(cause) not in listed:
                break
            finding = cause
        return finding

    roots = [root(f) for f in findings]
    groups = {id(f): (f, []) for f, r in zip(findings, roots) if r is f}
    for finding, cause in zip(findings, roots):
        if cause is finding:
            continue
        if id(cause) in groups:
            groups[id(cause)][1].append(finding)
        else:                       # a chain of causes that runs in a circle: its own group
            groups[id(finding)] = (finding, [])
    return list(groups.values())


def findings_text(findings: list[Finding]) -> list[str]:
    """Each cause's text, its consequences beneath it one line each: what a reader fixes first
    comes first."""
    blocks = []
    for cause, consequences in grouped(findings):
        lines = [cause.text()]
        if consequences:
            count = len(consequences)
            lines.append(f"    and {count} consequence{'s' if count != 1 else ''}, which "
                         f"follow{'s' if count == 1 else ''} from it:")
            lines += [f"        {f.where}: {f.kind}: {f.message}" for f in consequences]
        blocks.append("\n".join(lines))
    return blocks


def findings_data(findings: list[Finding]) -> list[dict]:
    """The findings as data, each consequence with ``caused_by``: the index in this list of
    the finding it follows from (null for a cause)."""
    index = {id(f): i for i, f in enumerate(findings)}
    return [{**f.as_dict(), "caused_by": index.get(id(f.caused_by))} for f in findings]


def summary(findings: list[Finding]) -> str:
    """``3 findings``, or ``1 finding and 2 consequences`` when some follow from others."""
    causes = len(grouped(findings))
    rest = len(findings) - causes
    text = f"{causes} finding{'s' if causes != 1 else ''}"
    return text + (f" and {rest} consequence{'s' if rest != 1 else ''}" if rest else "")


def display_path(path: str, base: str | None = None) -> str:
    """A path relative to ``base`` (default: the working directory) when it lies inside it."""
    try:
        relative = os.path.relpath(path, base or os.getcwd())
    except ValueError:
        return path
    return path if relative.startswith("..") else relative


def _pairs(values: dict) -> str:
    return ", ".join(f"{k}={format_value(v)}" for k, v in values.items())


def to_json(payload) -> str:
    return json.dumps(shown_json(payload), indent=2, sort_keys=False)
