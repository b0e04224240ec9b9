"""The checker's bounds: a time limit that stops any spec (between statements, or inside one
long sympy computation), and a limit on the tensors a spec expands to."""

import os
import re
import signal
import sys
import threading
import time

import pytest
from support.refusals import raises
from sympy.core.cache import clear_cache

from tspec.api import load, read_spec
from tspec.checking import limits
from tspec.checking.check import check
from tspec.checking.limits import tensor_count
from tspec.cli import main
from tspec.errors import LimitError, SpecError, UsageError
from tspec.language.parser import parse
from tspec.symbolic import expr, shape


def nested(depth: int) -> str:
    """Blocks that each call the one below twice: 3 * 2^(depth-1) tensors expanded."""
    lines = ['dim B "b"', 'dim d "d"', 'block f0(X "B d") -> Y:', '    Y "B d" = relu(X)']
    for i in range(1, depth):
        lines += [f'block f{i}(X "B d") -> Y:', f'    A "B d" = f{i - 1}(X)',
                  f'    Y "B d" = f{i - 1}(A)']
    lines += ['input X "B d"', f'Y "B d" = f{depth - 1}(X)', "output Y"]
    return "\n".join(lines) + "\n"


def chain(length: int) -> str:
    lines = ['dim B "b"', 'dim d "d"', 'input X0 "B d"']
    lines += [f'X{i} "B d" = relu(X{i - 1}) + X{i - 1}' for i in range(1, length + 1)]
    return "\n".join(lines + [f"output X{length}"]) + "\n"


# shapes whose comparison takes sympy seconds: one statement, long
SLOW = ('dim a "a"\ndim b "b"\ndim c "c"\n'
        'input X "(a+b+c)**60 (a*b+c)**40"\n'
        'Y "(a+b+c)**60 (a*b+c)**40" = X * 2\noutput Y\n')


@pytest.mark.parametrize("depth, count", [(1, 3), (2, 6), (3, 12), (19, 786_432)])
def test_tensor_count_expands_every_block_call(depth, count):
    assert tensor_count(parse(nested(depth))) == count


def test_a_repeat_counts_once_and_a_when_its_larger_branch():
    spec = parse('dim B "b"\ndim N "layers"\nchoice c = one | two\n'
                 'block f(X "B") -> Y:\n    Y "B" = relu(X)\n'
                 'input X "B"\n'
                 'when c == one:\n    Y "B" = repeat(N, f, X)\n'
                 'else:\n    Z "B" = f(X) as first\n    Y "B" = f(Z) as second\n'
                 'output Y\n')
    assert tensor_count(spec) == 1 + max(1 + 1, 2 + 2 * 1)


def test_a_spec_that_expands_past_the_tensor_limit_is_refused_at_once():
    with pytest.raises(LimitError) as caught:
        check(parse(nested(60), "n.tspec"))
    assert str(caught.value) == (
        "n.tspec: the spec expands to about 10^18 tensors, every block call its own copy; the "
        "checker takes at most 100,000: call blocks fewer times (a repeat counts once)")
    with pytest.raises(LimitError, match=r"^n\.tspec: the spec expands to 196,608 tensors"):
        check(parse(nested(17), "n.tspec"))
    assert check(parse(nested(12), "n.tspec")).findings == []


@pytest.fixture(scope="module")
def long_chain():
    """20,000 equations: about half a second to check, without a limit."""
    return parse(chain(20_000), "c.tspec")


def linear(depth: int) -> str:
    """Blocks that each call the one below once."""
    lines = ['dim B "b"', 'dim d "d"', 'block f0(X "B d") -> Y:', '    Y "B d" = relu(X)']
    for i in range(1, depth):
        lines += [f'block f{i}(X "B d") -> Y:', f'    Y "B d" = f{i - 1}(X)']
    lines += ['input X "B d"', f'Y "B d" = f{depth - 1}(X)', "output Y"]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("depth", [65, 5000])
def test_calls_nested_past_the_depth_limit_are_refused_by_name(depth):
    with pytest.raises(LimitError) as caught:
        check(parse(linear(depth), "l.tspec"))
    top = depth - 1
    assert str(caught.value) == (
        f"l.tspec:{2 * depth - 127}: blocks call blocks more than 64 deep (f{top} -> "
        f"f{top - 1} -> f{top - 2} -> ... -> f{top - 62} -> f{top - 63} -> f{top - 64}); the "
        "checker follows at most 64")


def test_calls_nested_to_the_depth_limit_check_generate_and_run(capsys, tmp_path):
    path = tmp_path / "l.tspec"
    path.write_text(linear(64))
    assert main(["check", str(path)]) == 0
    assert main(["run", str(path), "--set", "B=2", "--set", "d=3"]) == 0   # no parameters
    out = capsys.readouterr().out
    assert "\nf63.Y  2 x 3\nY      2 x 3\n" in out


def test_thousands_of_equations_are_proved():
    result = check(parse(chain(3000), "c.tspec"))
    assert result.findings == [] and len(result.tensors) == 3001


MESSAGE = (": the spec has more statements, or more complex shape expressions, than the "
           "checker proves in that time; give it longer with --time-limit SECONDS")


# the signal may fire while Python runs a finaliser (a gc callback), which prints the error and
# drops it: the clock before the next statement stops the check then (what these tests show)
SWALLOWED = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
REACHED = r"at (its set-up|input X0|X(\d+) = relu\(X\d+\) \+ X\d+)"


@SWALLOWED
def test_the_time_limit_stops_between_statements_and_names_the_one_reached(long_chain):
    with pytest.raises(LimitError) as caught:
        check(long_chain, time_limit=0.1)
    found = re.fullmatch(r"c\.tspec(:\d+)?: the check stopped at its time limit of 0\.1 s, "
                         + REACHED + re.escape(MESSAGE), str(caught.value))
    assert found, str(caught.value)
    if found.group(3):                   # an equation: its own line
        assert int(found.group(1)[1:]) == int(found.group(3)) + 3


@SWALLOWED
def test_the_time_limit_interrupts_one_long_computation():
    # one statement whose shape comparison takes sympy seconds: the signal stops it inside
    with pytest.raises(LimitError) as caught:
        check(parse(SLOW, "s.tspec"), time_limit=0.2)
    assert re.fullmatch(r"s\.tspec:(4: the check stopped at its time limit of 0\.2 s, at input X"
                        r"|5: the check stopped at its time limit of 0\.2 s, at Y = X \* 2)"
                        + re.escape(MESSAGE), str(caught.value))
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) is signal.SIG_DFL


def test_outside_the_main_thread_the_limit_holds_between_statements(long_chain):
    errors = []

    def work():
        try:
            check(long_chain, time_limit=0.1)
        except LimitError as error:
            errors.append(error)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert len(errors) == 1
    assert re.fullmatch(r"c\.tspec(:\d+)?: the check stopped at its time limit of 0\.1 s, "
                        + REACHED + re.escape(MESSAGE), str(errors[0])), str(errors[0])


def test_no_limit_holds_for_everything_inside():
    with limits.time_limit(None), limits.time_limit(0.001):   # the inner does not bound it
        time.sleep(0.01)
        limits.reached(parse(chain(1), "x.tspec"))


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_a_time_limit_must_be_a_positive_number_of_seconds(capsys, value):
    assert main(["check", f"--time-limit={value}"]) == 2
    assert capsys.readouterr().err == (f"tspec: error: a time limit is a positive number of "
                                       f"seconds, not {float(value):g}\n")
    with pytest.raises(UsageError), limits.time_limit(float(value)):
        pass


@SWALLOWED
def test_the_cli_stops_at_its_time_limit_with_exit_2(tmp_path, capsys):
    path = tmp_path / "s.tspec"
    path.write_text(SLOW)
    # SLOW is slow the first time sympy expands it: a test before this one in the same
    # process (the 0.2 s limit's) leaves the expansions cached, and the check then ends in time
    clear_cache()
    assert main(["check", str(path), "--time-limit", "1"]) == 2
    error = capsys.readouterr().err
    assert re.fullmatch(rf"tspec: error: {re.escape(str(path))}:(4: the check stopped at its time "
                        r"limit of 1 s, at input X|5: the check stopped at its time limit of 1 s, "
                        r"at Y = X \* 2)" + re.escape(MESSAGE) + "\n", error), error


@SWALLOWED
def test_the_cli_limit_holds_from_the_start_reading_included(tmp_path, capsys):
    # before: the limit began with the proof; reading 20,000 lines took longer than the limit
    path = tmp_path / "c.tspec"
    path.write_text(chain(20_000))
    assert main(["check", str(path), "--time-limit", "0.01"]) == 2
    assert capsys.readouterr().err == (
        f"tspec: error: {path}: tspec check stopped at its time limit of 0.01 s, reading the "
        "spec; give it longer with --time-limit SECONDS\n")


# -- dim expressions of huge degree: sympy's work on them, and their values, grow with it

POWERS = ('dim B "b"\ndim d "d"\ndim e "e"\nlet e = (((d**64)**64)**64)**64\n'
          'input X "B d" "x"\nparam W "d d" "w"\nY "B d" "y" = X @ W\noutput Y\n')


def test_a_power_of_huge_degree_is_refused_where_it_is_written(tmp_path, capsys):
    # before: diffed at a 39-digit d, past 70 s and 1.65 GB (sympy's polynomials of degree
    # 16,777,216, then d to that power: 654 million digits)
    (tmp_path / "p.tspec").write_text(POWERS)
    for name, d in (("a", "9" * 39), ("b", "3")):
        (tmp_path / f"{name}.toml").write_text(f'spec = "p.tspec"\n[dims]\nB = 2\nd = {d}\n')
    message = (f"tspec: error: {tmp_path}/p.tspec:4:18: let e: (d ** 64) ** 64 has degree 4,096 "
               "in the dims; the limit is 256\n")
    for argv in (["diff", "a.toml", "b.toml"], ["check", "p.tspec"], ["shapes", "a.toml"],
                 ["docs", "a.toml", "--out", "out"], ["run", "a.toml"],
                 ["check", "p.tspec", "--grid", "d=1:3:1"]):
        assert main([argv[0]] + [str(tmp_path / a) if a.endswith((".toml", ".tspec")) or
                                 a == "out" else a for a in argv[1:]]) == 2
        # a variant's spec is named with the variant that named it (the first one read)
        named = (f" (read as the spec of {tmp_path}/a.toml:1)"
                 if argv[1].endswith(".toml") else "")
        assert capsys.readouterr().err == message[:-1] + named + "\n"


def test_powers_within_the_limit_pass_and_one_past_it_is_refused():
    assert check(parse('dim d "d"\ndim k "k"\nlet k = (d**64)**4\n')).ok
    with pytest.raises(SpecError) as caught:
        parse('dim d "d"\ndim k "k"\nlet k = d**64 * d**64 * d**64 * d**64 * d\n', "k.tspec")
    assert str(caught.value) == ("k.tspec:3:39: let k: d ** 64 * d ** 64 * d ** 64 * d ** 64 * "
                                 "d has degree 257 in the dims; the limit is 256")


@pytest.mark.parametrize("text, message", [
    # derived dims put in each other: each within the limit, together past it
    ('dim B "b"\ndim d "d"\ndim a "a"\ndim b "b"\nlet a = d**64\nlet b = a**8\n',
     ("k.tspec:6: let b = a ** 8 has degree 512 in the dims once the derived dims it uses are "
     "put in; the limit is 256")),
    # a shape over a derived dim: where the checker reaches it
    (('dim B "b"\ndim d "d"\ndim a "a"\nlet a = d**64\ninput X "B d" "x"\n'
     'param W "d a**8" "w"\nY "B a**8" "y" = X @ W\noutput Y\n'),
     ("k.tspec:6: a**8 has degree 512 in the dims once the derived dims it uses are put in; "
     "the limit is 256")),
])
def test_a_degree_past_the_limit_once_derived_dims_are_put_in_is_refused(text, message):
    with pytest.raises(LimitError) as caught:
        check(parse(text, "k.tspec"))
    assert str(caught.value) == message


def test_the_prover_refuses_a_huge_degree_wherever_it_is_built():
    # concrete_values (the docs, diffs, runs) builds one before any check
    from tspec.checking.prove import concrete_values
    spec = parse('dim d "d"\ndim a "a"\ndim b "b"\nlet a = d**64\nlet b = a**8\n', "k.tspec")
    with pytest.raises(LimitError) as caught:
        concrete_values(spec, {}, {"d": 10 ** 39})
    assert str(caught.value) == ("derived dim b has degree 512 in the dims once the derived "
                                 "dims it uses are put in; the limit is 256")


def test_thousands_of_derived_dims_in_a_chain_are_put_in_each_other():
    # each derived dim from the one before, 3,000 deep: no recursion that deep
    lines = ['dim B "b"', 'dim a0 "a"'] + [f'dim a{i} "a"\nlet a{i} = a{i - 1} + 1'
                                           for i in range(1, 3000)]
    spec = parse("\n".join(lines + ['input X "B a2999" "x"', "output X"]) + "\n", "l.tspec")
    assert check(spec).ok
    from tspec.checking.prove import concrete_values
    values = concrete_values(spec, {}, {"a0": 5, "B": 1})
    assert values[spec.symbols()["a2999"]] == 3004


# -- the time limit firing inside the parser is the time limit, whatever the parser was doing
# (it read `bad shape token 'T' in "B T d": ... stopped at its time limit`: a syntax error)

SHAPED = ('dim B "b"\ndim T "t"\ndim d "d"\nblock attend(X_q "B T_q d") -> O:\n'
          '    dim T_q "q"\n    O "B T_q d" = relu(X_q)\n'
          'block g(X "B T d") -> O:\n    from attend with X_q = X, T_q = T\n'
          'input X "B T d"\nY "B T d" = g(X) as g1\noutput Y\n')


def _fires_in(monkeypatch, module, name: str, caller: str | None = None):
    """``module.name`` as called with the timer firing inside it (SIGALRM: its handler raises
    the limit's error there), from ``caller`` only when given."""
    real = getattr(module, name)

    def firing(*args, **kwargs):
        if caller is None or sys._getframe(1).f_code.co_name == caller:
            os.kill(os.getpid(), signal.SIGALRM)
            time.sleep(0.5)                 # the handler runs here, at the latest
        return real(*args, **kwargs)
    monkeypatch.setattr(module, name, firing)


@pytest.mark.parametrize("module, name, caller", [
    (shape, "to_sympy", None), (shape, "parse_expression", None),
    (expr, "parse_expression", "bound_shape")], ids=["shape-sympy", "shape-token", "binding"])
def test_the_time_limit_firing_inside_the_parser_surfaces_as_itself(monkeypatch, tmp_path,
                                                                    module, name, caller):
    path = tmp_path / "s.tspec"
    path.write_text(SHAPED)
    _fires_in(monkeypatch, module, name, caller)
    message = (f"{path}: tspec check stopped at its time limit of 60 s, reading the spec; give "
               "it longer with --time-limit SECONDS")
    with raises(LimitError, message), limits.time_limit(60, "tspec check"):
        read_spec(path)
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_a_time_limit_reading_the_spec_a_variant_names_is_not_said_as_the_variant_s(
        monkeypatch, tmp_path):
    (tmp_path / "s.tspec").write_text(SHAPED)
    (tmp_path / "v.toml").write_text('spec = "s.tspec"\n')
    _fires_in(monkeypatch, shape, "to_sympy")
    message = (f"{tmp_path / 's.tspec'}: tspec check stopped at its time limit of 60 s, reading "
               "the spec; give it longer with --time-limit SECONDS")
    with raises(LimitError, message), limits.time_limit(60, "tspec check"):
        load(tmp_path / "v.toml")
