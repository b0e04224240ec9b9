"""A spec's or variant's report: what `tspec check` says of it, and what every other command
that needs a proved model (shapes, diff, grid, run, docs, generate) says of it in the same
words before it refuses.

The report is the proof (the spec under the variant's choices, for every size), then the
variant's values (its constraints and shapes at its sizes), then the values against the
choices (``values``: a dim set for nothing, one the model needs without a value). A finding
of both the proof and the values is the proof's; one the values add that follows from such a
finding follows from the proof's.
"""

from dataclasses import dataclass, field

from tspec.checking import limits
from tspec.checking.check import Result
from tspec.checking.check import check as check_spec
from tspec.checking.findings import Finding, summary
from tspec.checking.values import value_findings
from tspec.errors import FindingsError
from tspec.language.model import Note
from tspec.language.variant import Variant


@dataclass
class Report:
    """The findings for one spec or variant: the proof for all sizes, then the variant's."""
    variant: Variant
    proof: Result
    concrete: Result | None
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings

    @property
    def notes(self) -> list[Note]:
        return self.proof.notes


def check_variant(variant: Variant, time_limit: float | None = limits.TIME_LIMIT) -> Report:
    """Check a spec (every choice combination) or a variant (its choices, then its values),
    within ``time_limit`` seconds (None: no limit; past it, a LimitError)."""
    spec = variant.spec
    every = variant.is_spec
    with limits.time_limit(time_limit):
        proof = check_spec(spec, variant.choices, all_choices=every)
        concrete = check_spec(spec, variant.choices, variant.dims, all_choices=every,
                              proved=proof) if variant.dims else None
    findings = value_findings(variant) + _merged(proof.findings,
                                                 concrete.findings if concrete else [])
    return Report(variant, proof, concrete, findings)


def require_proved(variant: Variant, refused: str, report: Report | None = None, *,
                   exit_status: int = 1) -> Report:
    """The variant's report, where it has no finding; else a FindingsError that holds them,
    ``2 findings and 8 consequences in NAME: <refused>`` (what the command does not do:
    "nothing to run"), as every command says it."""
    report = check_variant(variant) if report is None else report
    require_none(report.findings, f"in {variant.name}", refused, exit_status)
    return report


def require_none(findings: list[Finding], where: str, refused: str,
                 exit_status: int = 1) -> None:
    """A FindingsError for any of ``findings``: ``<summary> <where>: <refused>``."""
    if findings:
        raise FindingsError(f"{summary(findings)} {where}: {refused}", findings,
                            exit_status=exit_status)


def _merged(proof: list[Finding], concrete: list[Finding]) -> list[Finding]:
    """The proof's findings, then those the variant's values add (``scope`` "variant")."""
    place = {(f.kind, f.file, f.line, f.tensor): f for f in proof}
    twin: dict[int, Finding] = {}
    added = []
    for finding in concrete:
        known = place.get((finding.kind, finding.file, finding.line, finding.tensor))
        if known is not None:
            twin[id(finding)] = known
        else:
            finding.scope = "variant"
            added.append(finding)
    for finding in added:
        if finding.caused_by is not None and id(finding.caused_by) in twin:
            finding.caused_by = twin[id(finding.caused_by)]
    return list(proof) + added


def sizes_text(sizes: dict) -> str:
    """``B = 1, T_dec = 1024``: the sizes a command gives the dims a variant leaves free."""
    return ", ".join(f"{name} = {value}" for name, value in sizes.items()) or "no others"
