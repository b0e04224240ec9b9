"""Symbolic identities and claims: spec.prove.Prover, spec.prove.evaluate, spec.shape."""

import itertools
from fractions import Fraction

import pytest
import sympy
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tspec.checking.prove import PROVED, Prover, Verdict, evaluate
from tspec.symbolic.shape import Shape, dim_symbol, format_expr

d_model, H, T, T_dec, max_len, d_k, d_v, B = (
    dim_symbol(n) for n in ("d_model", "H", "T", "T_dec", "max_len", "d_k", "d_v", "B"))
DIMS = [B, T, T_dec, d_model, H, d_k, d_v, max_len]


def prover(*constraints, lets=None, values=None):
    return Prover(DIMS, list(constraints), dict(lets or {}), dict(values or {}))


def divisible(n, d):
    return sympy.Eq(sympy.Mod(n, d), 0, evaluate=False)


def test_dim_symbol_is_a_positive_integer():
    assert H.is_integer and H.is_positive
    assert dim_symbol("H") == H            # same name, same assumptions: the same symbol
    assert dim_symbol("H") != sympy.Symbol("H")


def test_heads_times_head_width_is_the_model_width():
    assert sympy.simplify(H * (d_model / H) - d_model) == 0
    assert prover().equal(H * (d_model / H), d_model) == PROVED


def test_derived_dim_through_let_is_proved_equal():
    p = prover(divisible(d_model, H), lets={d_k: d_model / H})
    assert p.equal(H * d_k, d_model) == PROVED
    assert p.integral(d_k) == PROVED


def test_divisibility_constraint_proves_the_quotient_whole():
    p = prover(divisible(d_model, H))
    assert p.integral(d_model / H) == PROVED
    assert p.divides(H, d_model) == PROVED
    # the witness d_model = H*q also proves multiples
    assert p.divides(H, 3 * d_model) == PROVED


def test_without_the_constraint_the_smallest_counterexample_is_returned():
    verdict = prover().integral(d_model / H)
    assert verdict == Verdict(False, (("d_model", 1), ("H", 2)))
    assert verdict.disproved and not verdict.proved and not verdict.unknown
    assert prover().divides(H, d_model).counterexample == (("d_model", 1), ("H", 2))


def test_linear_program_proves_a_bound_from_a_constraint():
    p = prover(sympy.LessThan(T, max_len, evaluate=False))
    assert p.at_most(2 * T - 1, 2 * max_len - 1) == PROVED
    assert p.at_most(T + T - 1, 2 * max_len - 1) == PROVED
    assert p.at_most(T, max_len) == PROVED
    # the converse does not follow: T=1, max_len=2 refutes it
    assert p.at_most(max_len, T).counterexample == (("T", 1), ("max_len", 2))


def test_bound_without_constraint_is_refuted():
    verdict = prover().at_most(2 * T - 1, 2 * max_len - 1)
    assert verdict.counterexample == (("T", 2), ("max_len", 1))


def test_numeric_bounds():
    p = prover()
    assert p.at_most(2, 3) == PROVED
    assert p.at_most(T, T + 1) == PROVED
    refuted = p.at_most(T + 1, T)
    assert refuted.disproved and refuted.counterexample == ()


def test_encoder_and_decoder_lengths_are_not_equal():
    verdict = prover().equal(T, T_dec)
    assert verdict == Verdict(False, (("T", 2), ("T_dec", 1)))


def test_equal_all_needs_every_pair():
    p = prover()
    assert p.equal_all([(B, B), (T, T)]) == PROVED
    assert p.equal_all([(B, B), (T, T_dec)]).counterexample == (("T", 2), ("T_dec", 1))


def test_nonlinear_identity_is_refuted_with_a_counterexample():
    assert prover().equal(T * T, T).counterexample == (("T", 2),)


def test_equality_constraint_proves_the_equality():
    p = prover(sympy.Eq(d_v, d_k, evaluate=False))
    assert p.equal(d_v, d_k) == PROVED


def test_equality_constraint_never_yields_a_counterexample():
    # whatever the verdict, no size allowed by d_v == d_k can refute d_v == d_k
    verdict = prover(sympy.Eq(d_v, d_k, evaluate=False)).equal(d_v, d_k)
    assert not verdict.disproved
    # and without the constraint the claim is refuted
    assert prover().equal(d_v, d_k).counterexample == (("d_k", 2), ("d_v", 1))


def test_parity_constraint_proves_two_divides_the_width():
    p = prover(divisible(d_model, 2))
    assert p.divides(2, d_model) == PROVED
    assert p.integral(d_model / 2) == PROVED
    assert prover().divides(2, d_model).counterexample == (("d_model", 1),)


def test_bound_values_are_substituted():
    p = prover(divisible(d_model, H), lets={d_k: d_model / H}, values={d_model: 512, H: 8})
    assert p.norm(d_k) == 64
    assert p.equal(d_k, 64) == PROVED
    assert p.equal(d_k, 65) == Verdict(False, (("d_k", 64),))


def test_satisfied_lists_the_broken_constraints():
    constraint = divisible(d_model, H)
    p = prover(constraint, sympy.LessThan(T, max_len, evaluate=False))
    assert p.satisfied({d_model: 512, H: 10}) == [constraint]
    assert p.satisfied({d_model: 512, H: 8}) == []


def test_the_counterexample_search_respects_constraints():
    # with d_model even, the smallest odd-quotient counterexample to 4 | d_model is 2
    p = prover(divisible(d_model, 2))
    assert p.divides(4, d_model).counterexample == (("d_model", 2),)


# ---------------------------------------------------------------------------------------------
# evaluate: exact arithmetic with Fractions

def test_evaluate_is_exact():
    value = evaluate(d_model / H, {d_model: 7, H: 2})
    assert value == Fraction(7, 2) and isinstance(value, Fraction)
    third = evaluate(sympy.Rational(1, 3) * H + 1, {H: 3})
    assert third == 2 and isinstance(third, Fraction)
    assert evaluate(H ** -1, {H: 4}) == Fraction(1, 4)
    assert evaluate(sympy.Mod(d_model, H), {d_model: 512, H: 10}) == 2
    assert evaluate(10 ** 30 / H, {H: 3}) == Fraction(10 ** 30, 3)    # no float rounding


def test_evaluate_relations():
    assert evaluate(divisible(d_model, H), {d_model: 512, H: 8}) is True
    assert evaluate(divisible(d_model, H), {d_model: 512, H: 10}) is False
    assert evaluate(sympy.LessThan(T, max_len, evaluate=False), {T: 5, max_len: 5}) is True
    assert evaluate(sympy.StrictLessThan(T, max_len, evaluate=False),
                    {T: 5, max_len: 5}) is False
    assert evaluate(sympy.Ne(T, T_dec, evaluate=False), {T: 1, T_dec: 2}) is True


def test_evaluate_square_root_falls_back_to_float():
    assert evaluate(sympy.sqrt(d_k), {d_k: 64}) == 8.0
    assert evaluate(sympy.sqrt(d_k), {d_k: 2}) == pytest.approx(2 ** 0.5)


def test_evaluate_zero_to_a_negative_power():
    with pytest.raises(ZeroDivisionError):
        evaluate((T - 1) ** -1, {T: 1})


# ---------------------------------------------------------------------------------------------
# Shapes

def test_shape_text_and_substitution():
    shape = Shape((B, T, H * d_k), H)
    assert shape.text() == "[H] B T H*d_k"
    assert shape.rank == 3
    assert shape.free_symbols() == {B, T, H, d_k}
    assert shape.subs({H: sympy.Integer(8), d_k: sympy.Integer(64)}).text() == "[8] B T 512"
    assert Shape(()).text() == "scalar"
    assert format_expr(d_model / H) == "d_model/H"


# ---------------------------------------------------------------------------------------------
# Linear bounds that need the dims' positivity or a strict constraint

def test_bound_that_needs_positive_dims_is_proved():
    L = dim_symbol("L")
    p = Prover([T, L], [sympy.LessThan(2 * T, L, evaluate=False)], {}, {})
    assert p.at_most(T, L) == PROVED


def test_strict_constraint_proves_the_bound():
    L = dim_symbol("L")
    p = Prover([T, L], [sympy.StrictLessThan(T, L, evaluate=False)], {}, {})
    assert p.at_most(T, L) == PROVED


def test_bounds_from_constraints_are_never_refuted_wrongly():
    # whatever the proof methods manage, no allowed size refutes what the constraints imply
    L = dim_symbol("L")
    for constraint in (sympy.LessThan(2 * T, L, evaluate=False),
                       sympy.StrictLessThan(T, L, evaluate=False)):
        assert not Prover([T, L], [constraint], {}, {}).at_most(T, L).disproved



def test_a_divisibility_constraint_on_a_given_value_proves_itself():
    """With H = 8 given, `require H % H_kv == 0` reads 8 % H_kv == 0: no witness can stand
    for 8, yet the claim that H_kv divides 8 (or 16) is the constraint itself."""
    H_kv = dim_symbol("H_kv")
    proof = Prover(DIMS + [H_kv], [divisible(H, H_kv)], {}, {H: 8})
    assert proof.divides(H_kv, 8).proved
    assert proof.divides(H_kv, 16).proved
    assert not proof.divides(H_kv, 4).proved          # H_kv = 8 divides 8, not 4


# ---------------------------------------------------------------------------------------------
# Facts combined: divisibility through derived dims, and claims a constraint states outright

def test_divisibility_witnesses_combine_through_a_derived_dim():
    """d_model = H*q (d_model % H == 0) and d_k = d_model/H = q even (d_k % 2 == 0): so
    d_model = 2*H*r, and 2*H divides d_model (split_heads(X, 2*H)), d_k / 2 is whole."""
    p = prover(divisible(d_model, H), divisible(d_k, 2), lets={d_k: d_model / H})
    assert p.divides(2 * H, d_model) == PROVED
    assert p.integral(d_k / 2) == PROVED
    assert p.at_most(1, d_k / 2) == PROVED
    assert p.at_most(2, d_k) == PROVED
    # d_k % 2 == 0 alone makes d_model/H an even whole number
    assert prover(divisible(d_k, 2), lets={d_k: d_model / H}).divides(2 * H, d_model) == PROVED
    # and without the parity, 2*H need not divide d_model
    assert prover(divisible(d_model, H), lets={d_k: d_model / H}).divides(
        2 * H, d_model).counterexample == (("d_model", 1), ("H", 1), ("d_k", 1))


def test_two_divisors_of_one_dim_prove_their_least_common_multiple():
    p = prover(divisible(T, 4), divisible(T, 6))
    assert p.divides(12, T) == PROVED
    assert p.divides(24, T).counterexample == (("T", 12),)


def test_a_claim_a_constraint_states_is_proved():
    """Each claim below is one of the constraints, as written or scaled: never unproved (the
    hint would ask for a constraint that is already there)."""
    L = dim_symbol("L")
    assert prover(sympy.LessThan(T * T, L, evaluate=False)).at_most(T * T, L) == PROVED
    assert prover(sympy.LessThan(T * H, L, evaluate=False)).at_most(2 * T * H, 2 * L) == PROVED
    assert prover(sympy.Eq(T + 1, 2 * H, evaluate=False)).equal(T + 1, 2 * H) == PROVED
    assert prover(sympy.Eq(T * H, B * B, evaluate=False)).equal(B * B, T * H) == PROVED
    assert prover(divisible(T + 1, H)).divides(H, 2 * T + 2) == PROVED


def test_a_multiple_is_at_least_its_divisor():
    assert prover(divisible(T, H)).at_most(H, T) == PROVED
    assert prover(divisible(T, H)).at_most(H + 1, T).counterexample == (("T", 1), ("H", 1))


A, C, K = (dim_symbol(n) for n in ("a", "c", "k"))
TERMS = st.sampled_from([A, C, H, K, sympy.Integer(1), sympy.Integer(2), sympy.Integer(3)])


@st.composite
def dim_exprs(draw, depth=0):
    if depth >= 2 or draw(st.booleans()):
        return draw(TERMS)
    left, right = draw(dim_exprs(depth + 1)), draw(dim_exprs(depth + 1))
    return draw(st.sampled_from([left * right, left * right, left + right, left / right]))


@st.composite
def facts(draw):
    kind = draw(st.sampled_from(["mod", "mod", "mod", "le", "eq"]))
    left, right = draw(dim_exprs()), draw(dim_exprs())
    if kind == "mod":
        return divisible(left, right)
    relation = sympy.LessThan if kind == "le" else sympy.Eq
    return relation(left, right, evaluate=False)


@settings(max_examples=150, deadline=None)
@example([divisible(A * C, 2)], H, "divides", sympy.Integer(2), A)      # a*c even, a odd
@example([divisible(A, H), divisible(K, 2)], A / H, "divides", 2 * H, A)
@example([divisible(A * C, H)], 2 * C, "divides", H, A * K)
@given(st.lists(facts(), max_size=3), dim_exprs(), st.sampled_from(["divides", "divides",
                                                                    "at_most", "equal"]),
       dim_exprs(), dim_exprs())
def test_what_the_prover_proves_holds_at_every_allowed_size(constraints, let, claim, x, y):
    """Soundness, the combined witnesses included: a claim proved under random constraints
    (divisibility through a derived dim k among them) holds at every size 1..5 of a, c and H
    that meets them."""
    if K in let.free_symbols:
        let = H * 2
    p = Prover([A, C, H, K], constraints, {K: let}, {})
    verdict = getattr(p, claim)(x, y)
    if not verdict.proved:
        return
    substituted = [f.xreplace({K: let}) for f in constraints]
    for values in itertools.product(range(1, 6), repeat=3):
        sizes = dict(zip((A, C, H), values))
        try:
            if not all(evaluate(f, sizes) for f in substituted):
                continue
            left, right = (evaluate(e.xreplace({K: let}), sizes) for e in (x, y))
        except ZeroDivisionError:
            continue
        if claim == "divides":
            holds = left != 0 and (right / left).denominator == 1
        else:
            holds = left <= right if claim == "at_most" else left == right
        assert holds, (constraints, let, claim, x, y, sizes)


def test_a_comparison_that_divides_by_zero_once_an_equality_is_put_in_is_false():
    """`require a == 0` puts a = 0 into `a + c/a <= a`: a division by zero, which sympy
    refuses to compare (a TypeError, once a crash of tspec check); the fact is false, so no
    size meets the constraints."""
    p = Prover([A, C], [sympy.Eq(A, 0, evaluate=False),
                        sympy.LessThan(A + C / A, A, evaluate=False)], {}, {})
    assert p.facts[1] is sympy.false
    assert p.satisfiable() == "no"


# ---------------------------------------------------------------------------------------------
# Bounds on products, from constraints multiplied out by positive dims

P_, Q_, R_, S_, L_ = (dim_symbol(n) for n in ("p", "q", "r", "s", "L"))


def test_a_bound_on_a_product_of_derived_dims_follows_from_the_constraint_multiplied_out():
    # require H_img*W_img <= max_len*p*p, n_h = H_img/p, n_w = W_img/p: n_h*n_w <= max_len
    p = Prover([P_, Q_, R_, L_], [divisible(Q_, P_), divisible(R_, P_),
                                  sympy.LessThan(Q_ * R_, L_ * P_ * P_, evaluate=False)],
               {S_: Q_ / P_}, {})
    assert p.at_most((Q_ / P_) * (R_ / P_), L_) == PROVED
    assert p.at_most(S_ * (R_ / P_), L_) == PROVED
    # and not one bound more: n_h*n_w + 1 <= max_len fails at the sizes the search finds
    assert p.at_most((Q_ / P_) * (R_ / P_) + 1, L_).disproved


def test_bounds_on_each_factor_bound_their_product():
    # n_h <= 16, n_w <= 16, 256 <= max_len: the counterexample search (sizes up to 12) can
    # never refute it, and the linear program cannot see a product
    p = Prover([Q_, R_, L_], [sympy.LessThan(Q_, 16, evaluate=False),
                              sympy.LessThan(R_, 16, evaluate=False),
                              sympy.LessThan(256, L_, evaluate=False)], {}, {})
    assert p.at_most(Q_ * R_, L_) == PROVED
    assert not p.at_most(Q_ * R_ + 1, L_).proved
    p = Prover([Q_, R_, L_], [sympy.LessThan(Q_, 16, evaluate=False),
                              sympy.LessThan(R_, 16, evaluate=False),
                              sympy.LessThan(255, L_, evaluate=False)], {}, {})
    assert not p.at_most(Q_ * R_, L_).proved


@pytest.mark.slow
@settings(max_examples=15, deadline=None)     # each ~0.8 s: the search runs out first
@example([6, 18, 33], 0, [P_])          # products in the thousands, where floats went wrong
@given(st.lists(st.integers(1, 40), min_size=2, max_size=3), st.integers(0, 50),
       st.lists(st.sampled_from([P_, S_]), min_size=1, max_size=2))
def test_products_of_bounded_factors_are_bounded_by_the_product_of_the_bounds(
        bounds, spare, divisors):
    """Each factor x_i <= b_i and L >= prod(b_i) + spare prove prod(x_i) <= L; written over
    derived dims x_i = y_i / D (D a product of dims), with the bounds multiplied out by D
    (y_i <= b_i*D), as a spec with divisibility constraints writes them."""
    ys = [dim_symbol(f"y{i}") for i in range(len(bounds))]
    xs = [dim_symbol(f"x{i}") for i in range(len(bounds))]
    denominator = sympy.Mul(*divisors)
    facts = [sympy.LessThan(y, b * denominator, evaluate=False) for y, b in zip(ys, bounds)]
    facts += [divisible(y, denominator) for y in ys]
    facts.append(sympy.LessThan(sympy.Mul(*bounds) + spare, L_, evaluate=False))
    p = Prover(ys + [P_, S_, L_] + xs, facts, {x: y / denominator for x, y in zip(xs, ys)}, {})
    assert p.at_most(sympy.Mul(*xs), L_) == PROVED


def test_a_bound_of_lower_degree_than_the_constraint_that_gives_it_is_proved():
    n = dim_symbol("n")
    p = Prover([n, L_], [sympy.LessThan(n * n, L_, evaluate=False)], {}, {})
    assert p.at_most(n, L_) == PROVED                  # L - n = (L - n^2) + (n-1)^2 + (n-1)
    assert p.at_most(n + 1, L_).disproved              # n = L = 1
    p = Prover([n, L_], [sympy.LessThan(n ** 3, L_, evaluate=False)], {}, {})
    assert p.at_most(n * n, L_) == PROVED


def test_constraints_only_large_sizes_meet_are_satisfiable():
    # the samples reach 2**16: `require 65536 <= L` was "no sizes found ... none proved to
    # exist", and a variant of V = 128256 under `require 100000 <= V` was refused
    assert Prover([L_], [sympy.LessThan(65536, L_, evaluate=False)], {}, {}).satisfiable() \
        == "yes"
    assert Prover([L_, H], [sympy.LessThan(100000, L_, evaluate=False), divisible(L_, H),
                            sympy.LessThan(L_, 100500, evaluate=False)], {}, {}) \
        .satisfiable() == "yes"
    assert Prover([L_], [sympy.LessThan(65536, L_, evaluate=False),
                         sympy.LessThan(L_, 65535, evaluate=False)], {}, {}).satisfiable() \
        == "no"
