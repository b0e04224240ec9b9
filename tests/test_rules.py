"""What the checker proves is what code generation and `tspec run` need: no spec that `tspec
check` proves is refused later, and no correct spec is left unproved for want of combining the
facts it states."""

import spec
from spec.check import check

HEADS = '''\
spec heads "heads"
dim B "batch"
dim T "length"
dim d_model "width"
dim H "heads"
dim d_k "head width"
let d_k = d_model / H
require d_model % H == 0
require d_k % 2 == 0
input X "B T d_model" "input"
'''


def findings(text: str, choices=None, all_choices=True) -> list[tuple]:
    """Each finding's place, kind, message and counterexample (the hints' wording is pinned
    in test_findings)."""
    return [(f.where, f.kind, f.message, f.counterexample)
            for f in check(spec.parse(text, "t.tspec"), choices,
                           all_choices=all_choices).findings]


# ---------------------------------------------------------------------------------------------
# Facts combined: divisibility through derived dims

def test_half_a_head_is_a_whole_number_when_the_head_width_is_even():
    """d_k = d_model / H with d_model % H == 0 and d_k % 2 == 0: d_k / 2 is whole (it used
    to be unproved, with a hint to add `require d_k % 2 == 0`, already there)."""
    text = HEADS + ('dim d_half "half a head"\nlet d_half = d_k / 2\n'
                    'param W "d_model d_half" "weight"\nY "B T d_half" "output" = X @ W\n')
    assert findings(text) == []


def test_twice_the_heads_divide_the_width_when_the_head_width_is_even():
    """d_model = H*q and q = 2*r: 2*H divides d_model, as split_heads(X, 2*H) needs."""
    text = HEADS + 'Y[2*H] "B T d_k/2" "half heads" = split_heads(X, 2*H)\n'
    assert findings(text) == []
    # without the parity, 2*H need not divide d_model: a counterexample, not a proof
    text = text.replace("require d_k % 2 == 0\n", "")
    assert findings(text) == [
        ("t.tspec:10", "not-divisible",
         "split_heads: heads must divide the last axis: 2*H must divide d_model",
         {"d_model": 1, "H": 1, "d_k": 1})]
