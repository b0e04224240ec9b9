"""Grids: `tspec check VARIANT --grid ...` and tspec.grid. Every combination's verdict and
counts must be what checking and costing that one variant gives (spec.check, the docs'
sizes and spec.counts); bad axes get one-line errors, pinned here."""

import csv
import io
import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.command_line import ROOT, run
from support.compare import assert_agrees
from support.specs import builtin_line

import tspec
from tspec import api, cli
from tspec.analysis.counts import DTYPE
from tspec.analysis.grid import MAX_COMBINATIONS
from tspec.errors import GridError, UsageError

# lines of the built-in spec, found by their text
HEADS = builtin_line("require d_model % H == 0")
ROTARY_HEADS = builtin_line("require d_model % (2*H) == 0")

SYNTAX = "expected NAME=START:STOP:STEP, NAME=A,B,C or NAME=VALUE"


pytestmark = pytest.mark.usefixtures("in_checkout")     # paths print relative to the checkout


# ---------------------------------------------------------------------------------------------
# Output

TABLE = f"""\
== gpt2_small (spec/variants/gpt2_small.toml): grid over H, d_model (6 combinations)
   proved once, for every size the constraints allow (choices arch=decoder_only, norm=pre, \
activation=gelu_tanh, positional=learned, output_embedding=tied, head_dims=split, \
attention_bias=all, normalization=layer_norm, key_value_heads=all, feed_forward_bias=all, decoding=full, attention_window=full)
   fixed: d_ff=3072, N=12, V=50257, max_len=1024
   counted at B=1, T_dec=1024; activation memory in float32

 H  d_model  valid   parameters            FLOPs  activation bytes  breaks
--  -------  -----  -----------  ---------------  ----------------  \
----------------------------------------------------
 8      512  yes     76,680,704  183,025,238,016     1,733,959,680
 8      640  yes     99,773,824  236,499,206,144     1,824,137,216
 8      768  yes    124,439,808  293,194,399,744     1,914,314,752
12      512  no               —                —                 —  \
require d_model % H == 0 (spec/transformer.tspec:{HEADS})
12      640  no               —                —                 —  \
require d_model % H == 0 (spec/transformer.tspec:{HEADS})
12      768  yes    124,439,808  293,546,721,280     2,316,967,936

6 combinations: 4 valid, 2 invalid
"""


def test_a_small_grid_as_a_table(capsys):
    code, out, err = run(capsys, "check", "gpt2_small", "--grid", "H=8,12", "--grid",
                         "d_model=512:768:128")
    assert (code, err) == (1, "")          # 1: some combination is invalid
    assert out == TABLE


def test_every_combination_valid_exits_0_and_only_filters_rows(capsys):
    code, out, err = run(capsys, "check", "base", "--set", "V=37000", "--grid", "H=8,16")
    assert (code, err) == (0, "")
    assert out.endswith("\n2 combinations: 2 valid, 0 invalid\n")
    code, out, _ = run(capsys, "check", "gpt2_small", "--grid", "H=8,12", "--grid",
                       "d_model=512:768:128", "--only", "invalid")
    assert code == 1
    rows = [line for line in out.splitlines() if line.startswith("12 ")]
    assert len(rows) == 2 and all(" no " in row for row in rows)
    assert " yes " not in out
    assert out.endswith("\n6 combinations: 4 valid, 2 invalid (shown: the invalid ones)\n")


def test_json(capsys):
    code, out, err = run(capsys, "check", "gpt2_small", "--grid", "H=8,12", "--grid",
                         "d_model=512:768:128", "--format", "json")
    assert (code, err) == (1, "")
    data = json.loads(out)
    assert {k: data[k] for k in ("target", "file", "combinations", "valid", "invalid",
                                 "dtype", "axes", "sizes")} == {
        "target": "gpt2_small", "file": "spec/variants/gpt2_small.toml", "combinations": 6,
        "valid": 4, "invalid": 2, "dtype": DTYPE,
        "axes": {"H": [8, 12], "d_model": [512, 640, 768]}, "sizes": {"B": 1, "T_dec": 1024}}
    assert data["fixed"] == {"d_ff": 3072, "N": 12, "V": 50257, "max_len": 1024}
    assert data["choices"]["arch"] == "decoder_only"
    first, invalid = data["points"][0], data["points"][3]
    assert first == {"dims": {"H": 8, "d_model": 512}, "valid": True,
                     "derived": {"d_k": 64, "d_v": 64}, "parameters": 76680704,
                     "flops": 183025238016, "activation_bytes": 1733959680, "breaks": []}
    assert invalid == {"dims": {"H": 12, "d_model": 512}, "valid": False,
                       "derived": {"d_k": "128/3", "d_v": "128/3"}, "parameters": None,
                       "flops": None, "activation_bytes": None,
                       "breaks": [{"kind": "constraint-violated",
                                   "statement": "require d_model % H == 0",
                                   "file": "spec/transformer.tspec", "line": HEADS}]}


def test_csv(capsys):
    code, out, _ = run(capsys, "check", "gpt2_small", "--grid", "H=8,12", "--grid",
                       "d_model=512:768:128", "--format", "csv")
    assert code == 1
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == ["H", "d_model", "valid", "parameters", "flops", "activation_bytes",
                       "breaks"]
    assert rows[1] == ["8", "512", "true", "76680704", "183025238016", "1733959680", ""]
    assert rows[4] == ["12", "512", "false", "", "", "",
                       f"require d_model % H == 0 (spec/transformer.tspec:{HEADS})"]
    assert len(rows) == 7


def test_a_combination_breaking_two_constraints_names_both(capsys):
    code, out, _ = run(capsys, "check", "base", "--set", "positional=rotary", "--grid",
                       "d_model=513", "--grid", "H=8", "--format", "csv")
    assert code == 1
    assert list(csv.reader(io.StringIO(out)))[1][-1] == (
        f"require d_model % H == 0 (spec/transformer.tspec:{HEADS}); "
        f"require d_model % (2 * H) == 0 (spec/transformer.tspec:{ROTARY_HEADS})")


def test_free_dims_leave_the_counts_empty_and_say_so(capsys):
    code, out, _ = run(capsys, "check", "base", "--grid", "H=8")
    assert code == 0
    assert "   no value for V: parameters, FLOPs, activation bytes not counted (--set or " \
           "--grid one)" in out.splitlines()
    assert out.splitlines()[-3].split() == ["8", "yes", "—", "—", "—"]


def test_a_failed_proof_judges_nothing(capsys):
    code, out, err = run(capsys, "check", "seed_004", "--grid", "N=4,8")
    assert code == 1 and out == ""
    assert err.endswith("tspec: 30 findings in seed_004: no combination judged\n")
    # in Python too: it said "0 combinations" and "proved once", no exception
    with pytest.raises(tspec.FindingsError) as refused:
        tspec.grid("seed_004", {"N": [4, 8]})
    assert refused.value.message == "30 findings in seed_004: no combination judged"
    assert len(refused.value.findings) == 30


# ---------------------------------------------------------------------------------------------
# Errors: one line, exit 2, no traceback

@pytest.mark.parametrize("argv, message", [
    (["--grid", "H"], f"--grid H: {SYNTAX}"),
    (["--grid", "H=4=5"], f"--grid H=4=5: {SYNTAX}"),
    (["--grid", "1H=4"], "--grid 1H=4: '1H' is not a dim name"),
    (["--grid", "H="], f"--grid H=: no values after '='; {SYNTAX}"),
    (["--grid", "H=4:8"], "--grid H=4:8: a range is START:STOP:STEP (STOP included)"),
    (["--grid", "H=4:8:1:2"], "--grid H=4:8:1:2: a range is START:STOP:STEP (STOP included)"),
    (["--grid", "H=4:8:0"], "--grid H=4:8:0: STEP must be a positive integer, got '0'"),
    (["--grid", "H=4:8:-2"], "--grid H=4:8:-2: STEP must be a positive integer, got '-2'"),
    (["--grid", "H=4:8:1.5"], "--grid H=4:8:1.5: STEP must be a positive integer, got '1.5'"),
    (["--grid", "H=8:4:1"], ("--grid H=8:4:1: START 8 is greater than STOP 4, so the range is "
                            "empty")),
    (["--grid", "H=0:4:1"], "--grid H=0:4:1: dim values are positive integers, got 0"),
    (["--grid", "H=4.5"], "--grid H=4.5: dim values are positive integers, got '4.5'"),
    (["--grid", "H=-4"], "--grid H=-4: dim values are positive integers, got '-4'"),
    (["--grid", "H=4,,8"], "--grid H=4,,8: dim values are positive integers, got ''"),
    (["--grid", "H=4,8,4"], "--grid H=4,8,4: 4 is listed twice"),
    (["--grid", "H=" + "9" * 41], f"--grid H={'9' * 41}: a value of 41 digits; the limit is 40"),
    (["--grid", "Hx=4"], ("--grid Hx=4: unknown dim 'Hx' in spec transformer; did you mean "
                         "'H'?")),
    (["--grid", "d_k=4"], ("--grid d_k=4: d_k is derived under these choices (let d_k = "
                          "d_model / H); vary the dims it is defined from")),
    (["--grid", "arch=4"], ("--grid arch=4: arch is a choice, not a dim; a grid varies dims "
                           "(fix a choice with --set arch=OPTION)")),
    (["--grid", "H=4", "--grid", "H=8"], "--grid H is given twice"),
    (["--grid", "H=4", "--set", "H=8"], ("H is both fixed (--set) and varied (--grid); give it "
                                        "once")),
    (["--grid", "d_model=1:1000:1", "--grid", "H=1:1001:1"],
     ("the grid has 1,001,000 combinations; the limit is 1,000,000 (narrow a range or take a "
     "larger STEP)")),
    (["--grid", "d_model=1:" + "9" * 39 + ":1"],
     (f"the grid has {10 ** 39 - 1:,} combinations; the limit is 1,000,000 (narrow a range or "
     "take a larger STEP)")),
    (["big", "--grid", "H=4"], "--grid checks one spec or variant at a time; got 2: base, big"),
    (["--format", "csv"], "--format csv is for grids: give --grid NAME=VALUES"),
    (["--only", "valid"], "--only is for grids: give --grid NAME=VALUES"),
])
def test_bad_grids_are_one_line_errors(capsys, argv, message):
    code, out, err = run(capsys, "check", "base", *argv)
    assert (code, out) == (2, "")
    assert err == f"tspec: error: {message}\n"


def test_a_dim_the_spec_fixes_cannot_be_varied(capsys):
    code, _, err = run(capsys, "check", "seed_004", "--grid", "H=4,8")
    assert code == 2
    assert err == "tspec: error: --grid H=4,8: H is fixed to 8 by the spec\n"


def test_the_cap_is_a_million():
    assert MAX_COMBINATIONS == 1_000_000


@pytest.mark.parametrize("axes, message", [
    ({}, "a grid needs at least one dim to vary"),
    ({"H": []}, "grid H: no values"),
    ({"H": range(8, 4)}, "grid H: no values"),
    ({"H": range(4)}, "grid H: dim values are positive integers, got 0"),
    ({"H": [4, 4.5]}, "grid H: dim values are positive integers, got 4.5"),
    ({"H": [True]}, "grid H: dim values are positive integers, got True"),
    ({"H": [4, 8, 4]}, "grid H: 4 is listed twice"),
    ({"H": "8:4:1"}, "grid H: START 8 is greater than STOP 4, so the range is empty"),
    ({"H": [10 ** 40]}, "grid H: a value of more than 40 digits"),
    ({"": [4]}, "grid: '' is not a dim name"),
])
def test_bad_api_grids_raise_grid_errors(axes, message):
    with pytest.raises(GridError) as caught:
        tspec.grid("base", axes)
    assert str(caught.value) == message
    assert isinstance(caught.value, UsageError)


# ---------------------------------------------------------------------------------------------
# Every combination is what checking and costing that variant alone gives

@pytest.mark.parametrize("name, settings, axes, invalid", [
    ("gpt2_small", [], {"H": [8, 12, 16], "d_model": range(512, 769, 128)}, 2),
    ("base", ["V=37000"], {"d_model": [510, 512, 513], "H": [6, 8]}, 4),
    ("bert_base", [], {"max_len": [256, 512], "N": [2, 12]}, 0),
    ("bert_base", ["T=400"], {"max_len": "256:512:256"}, 1),
    ("transformer_base", ["head_dims=free"], {"d_k": [32, 64], "d_v": [48, 64]}, 0),
    ("gpt2_small", ["T_dec=2048"], {"max_len": [1024, 2048]}, 1),
])
def test_every_combination_is_what_spec_check_and_the_counts_give(name, settings, axes,
                                                                   invalid):
    grid = assert_agrees(name, settings, axes)
    assert grid.invalid_count == invalid


def test_counts_past_int64_are_exact():
    grid = assert_agrees("gpt2_small", [], {"d_model": [2 ** 40, 3 * 2 ** 40], "H": [2 ** 20]})
    assert all(p.valid for p in grid.points())
    assert max(p.flops for p in grid.points()) > 2 ** 63


@settings(max_examples=12, deadline=None)
@given(st.sampled_from([("gpt2_small", []), ("base", ["V=1000"]), ("bert_base", [])]),
       st.dictionaries(st.sampled_from(["d_model", "H", "d_ff", "N"]),
                       st.lists(st.integers(1, 24), min_size=1, max_size=2, unique=True),
                       min_size=1, max_size=3))
def test_random_grids_agree_with_one_check_per_combination(variant, axes):
    name, settings = variant
    assert_agrees(name, settings, axes)


def test_the_api_takes_ranges_lists_and_text_and_settings():
    by_range = tspec.grid("gpt2_small", {"H": range(4, 17, 4)}, ["N=2"])
    by_text = tspec.grid(api.load("gpt2_small"), {"H": "4:16:4"}, ["N=2"])
    by_list = tspec.grid("gpt2_small", {"H": (4, 8, 12, 16)}, ["N=2"])
    assert [p.as_dict() for p in by_range.points()] == \
        [p.as_dict() for p in by_text.points()] == [p.as_dict() for p in by_list.points()]
    assert by_range.fixed["N"] == 2 and by_range.summary() == \
        "4 combinations: 4 valid, 0 invalid"
    assert [p.dims["H"] for p in by_range.points("valid")] == [4, 8, 12, 16]
    assert list(by_range.points("invalid")) == []
    with pytest.raises(GridError, match="only: 'some' is neither 'valid' nor 'invalid'"):
        list(by_range.points("some"))


def test_the_first_axis_varies_slowest():
    grid = tspec.grid("gpt2_small", {"N": [1, 2], "H": [4, 8, 16]})
    assert [tuple(p.dims.values()) for p in grid.points()] == [
        (1, 4), (1, 8), (1, 16), (2, 4), (2, 8), (2, 16)]


def test_ten_thousand_combinations_in_about_a_second():
    """The benchmark's grid (benchmarks/grid_speed.py), with a generous bound for a shared
    machine: the proof once, then every combination at once."""
    start = time.perf_counter()
    grid = tspec.grid("base", {"d_model": "256:1024:32", "H": [4, 8, 12, 16],
                              "d_ff": "512:2816:256", "N": range(1, 11)}, ["V=37000"])
    assert len(grid) == 10_000 and grid.invalid_count == 1_700
    assert time.perf_counter() - start < 5


def test_help_gives_the_syntax_and_the_exit_status(capsys):
    with pytest.raises(SystemExit):
        cli.main(["check", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "NAME=START:STOP:STEP (STOP included), NAME=A,B,C or NAME=VALUE" in out
    assert "at most 1,000,000 combinations" in out
    assert "(with --grid: every combination is valid), 1 when there are findings (with " \
           "--grid: some combination is invalid, or the proof has findings), 2 on bad " \
           "usage." in out


def test_a_grid_is_judged_at_the_sizes_it_is_counted_at(tmp_path, capsys):
    # require T_dec <= 100 with T_dec counted at max_len = 1024: every combination was
    # "valid", counted at sizes the spec refuses; docs and diff refused the same input
    text = api.BUILTIN_SPEC.read_text()
    (tmp_path / "t.tspec").write_text(text.replace("# Attention\n",
                                                   "# Attention\nrequire T_dec <= 100\n", 1))
    (tmp_path / "v.toml").write_text((ROOT / "spec" / "variants" / "gpt2_small.toml")
                                     .read_text().replace('spec = "transformer"',
                                                          'spec = "t.tspec"'))
    code, out, err = run(capsys, "check", str(tmp_path / "v.toml"), "--grid", "N=1,2")
    assert (code, out) == (1, "")
    assert err.endswith("tspec: 1 finding in v at the sizes it is counted at (B = 1, T_dec = "
                        "1024): no combination judged\n")
    # a constraint over those sizes and a dim varied: each combination judged with them
    (tmp_path / "t.tspec").write_text(text.replace("# Attention\n",
                                                   "# Attention\nrequire T_dec <= d_model\n", 1))
    grid = tspec.grid(str(tmp_path / "v.toml"), {"d_model": [768, 1536]}, ["H=12"])
    assert [(p.dims["d_model"], p.valid, [b.statement for b in p.breaks])
            for p in grid.points()] == [(768, False, ["require T_dec <= d_model"]),
                                        (1536, True, [])]
