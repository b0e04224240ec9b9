"""The seeds audit: every real mistake in the five seed notes, pinned; no false ones."""

from fractions import Fraction

import pytest

from spec import audit, check, load

MISTAKES = {
    "seed_000": [],
    "seed_001": [
        ("not-divisible", 18, "P", {"d_model": 1}),
    ],
    "seed_002": [],
    "seed_003": [
        ("not-integral", 11, "", {"d_model": 1, "H": 2, "d_k": Fraction(1, 2),
                                  "d_v": Fraction(1, 2)}),
        ("not-integral", 12, "", {"d_model": 1, "H": 2, "d_k": Fraction(1, 2),
                                  "d_v": Fraction(1, 2)}),
        ("operand-mismatch", 35, "Q_h", {"d_model": 2, "H": 2, "d_k": 1, "d_v": 1}),
        ("operand-mismatch", 36, "K_h", {"d_model": 2, "H": 2, "d_k": 1, "d_v": 1}),
        ("operand-mismatch", 37, "V_h", {"d_model": 2, "H": 2, "d_k": 1, "d_v": 1}),
        ("not-divisible", 47, "P", {"d_model": 1}),
    ],
    "seed_004": [
        ("shape-mismatch", 89, "decoder[i].O_h", {"T": 2, "T_dec": 1}),
        ("shape-mismatch", 104, "decoder[i].Q_ch", {"T": 1}),
        # S_ch follows from Q_ch (listed beneath it): declared as Q_ch is, it fits
        ("shape-mismatch", 107, "decoder[i].S_ch", {"T": 2, "T_dec": 1}),
        ("shape-mismatch", 105, "decoder[i].K_ch", {"T": 1, "T_dec": 1}),
        ("shape-mismatch", 106, "decoder[i].V_ch", {"T": 1, "T_dec": 1}),
    ],
}
UNSTATED = {"seed_000": 11, "seed_001": 4, "seed_002": 17, "seed_003": 0, "seed_004": 23}
NOTES = {"seed_000": 1, "seed_001": 4, "seed_002": 5, "seed_003": 2, "seed_004": 4}


@pytest.fixture(scope="module")
def reports():
    return {name: check(load(name)) for name in MISTAKES}


@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_every_mistake_is_found_and_nothing_else(reports, name):
    found = [(f.kind, f.line, f.tensor, f.counterexample) for f in reports[name].findings
             if f.kind != "unstated-shape"]
    assert found == MISTAKES[name]
    kinds = [f.kind for f in reports[name].findings]
    assert kinds.count("unstated-shape") == UNSTATED[name]
    assert len(reports[name].notes) == NOTES[name]


def test_seed_004_decoder_weighted_sum_is_over_T_dec(reports):
    (finding,) = [f for f in reports["seed_004"].findings if f.line == 89]
    assert finding.message == ("O_h is declared [H] B T d_v but its equation gives "
                               "[H] B T_dec d_v (axis 1)")
    assert finding.equation == "O_h = A_h @ V_h"
    assert (finding.expected, finding.inferred) == ("[H] B T d_v", "[H] B T_dec d_v")
    assert finding.dims == {"H": 8, "d_v": 64}     # bound by the seed itself
    assert finding.hint == ('declare O_h[H] as "B T_dec d_v", or fix the equation; line 90 '
                            'uses what its equation gives')


def test_seed_004_cross_attention_scores_are_T_dec_by_T(reports):
    (finding,) = [f for f in reports["seed_004"].findings if f.line == 107]
    assert finding.message == ("S_ch is declared [H] B T_dec T_dec but its equation gives "
                               "[H] B T_dec T (axis 2)")
    assert finding.counterexample == {"T": 2, "T_dec": 1}
    # declared as Q_ch is (T_dec by T), its scores would be T_dec by T_dec: it follows
    assert (finding.caused_by.line, finding.caused_by.tensor) == (104, "decoder[i].Q_ch")


def test_seed_003_projects_the_wrong_input(reports):
    (finding,) = [f for f in reports["seed_003"].findings if f.line == 35]
    assert finding.message == ("matmul inner dimensions of Q (n d_k) @ W_Q_h ([H] d_model "
                               "d_k): d_k vs d_model")
    assert finding.equation == "Q_h = Q @ W_Q_h"


def test_seed_004_unstated_projection_shapes_are_inferred(reports):
    by_line = {f.line: f for f in reports["seed_004"].findings if f.kind == "unstated-shape"}
    assert by_line[34].message == ("parameter W_Q has no stated shape; its uses require "
                                   "(d_model, d_model)")
    assert by_line[26].message == ("parameter E has no stated shape; its uses require "
                                   "(k1, d_model); k1 is a width the spec never names")


def test_seed_002_unstated_family_and_broadcast_shapes(reports):
    by_line = {f.line: f for f in reports["seed_002"].findings if f.kind == "unstated-shape"}
    assert by_line[20].message == ("parameter W_Q_h has no stated shape; its uses require "
                                   "n members of shape (d, d_k)")
    assert by_line[20].hint == 'declare it: param W_Q_h[n] "d d_k"'
    assert by_line[23].message == ("parameter W_O has no stated shape; its uses require "
                                   "(d_v*n, d)")
    assert by_line[40].message == ("parameter PE has no stated shape; its uses require (d); "
                                   "any shape that broadcasts to (T, d) fits, and this is "
                                   "the smallest")


def test_the_committed_audit_report_is_current():
    diff = audit.stale(audit.default_path())
    assert diff is None, f"docs/seed-audit.md is stale; run `tspec audit`:\n{diff}"
