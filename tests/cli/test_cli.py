"""The `tspec` command line, run in-process through tspec.cli.main (and once as a process)."""

import json
import math
import re
import subprocess
import sys

import pytest
from support.command_line import ROOT, run
from support.refusals import raises
from support.specs import builtin_line

from tspec import api, cli, shipped
from tspec.checking.findings import KINDS, findings_text
from tspec.errors import UsageError

# lines of the built-in spec, found by their text
HEADS = builtin_line("require d_model % H == 0")


def columns(line):
    """The cells of one row of the shapes table (cells are separated by two spaces or more)."""
    return re.split(r" {2,}", line.strip())


def test_check_with_no_arguments_proves_the_builtin_spec(capsys):
    code, out, err = run(capsys, "check")
    assert code == 0
    assert err == ""
    assert "proved" in out
    combinations = math.prod(len(c.options) for c in api.load("transformer").spec.choices.values())
    assert ("   proved: every shape agrees for all sizes the constraints allow "
            f"({combinations} choice combinations)") in out.splitlines()
    assert out.startswith("== transformer (")


def test_check_base_and_big(capsys):
    code, out, err = run(capsys, "check", "base", "big")
    assert code == 0 and err == ""
    assert out.count("   proved: every shape agrees") == 2
    assert ("   variant: every constraint holds and every shape evaluates "
            "(d_model=512, H=8, d_ff=2048, N=6)") in out.splitlines()
    assert ("   variant: every constraint holds and every shape evaluates "
            "(d_model=1024, H=16, d_ff=4096, N=6)") in out.splitlines()


def test_check_base_with_ten_heads_has_a_finding(capsys):
    code, out, err = run(capsys, "check", "base", "--set", "H=10")
    assert code == 1
    assert err == ""
    lines = out.splitlines()
    assert lines[2].startswith("   1 finding (choices arch=encoder_decoder, norm=post, ")
    assert any(line.endswith(": constraint-violated: d_model=512 is not divisible by H=10")
               for line in lines)
    assert "    hint: valid H near 10: 8, 16; valid d_model near 512: 510, 520" in lines
    assert "    dims: d_model=512, H=10" in lines


def test_unknown_target_is_a_usage_error(capsys):
    code, out, err = run(capsys, "check", "nope")
    assert code == 2
    assert out == ""
    assert err.startswith("tspec: error: no spec or variant named 'nope': not a file, and "
                          "not a built-in (transformer, ")
    assert err.count("\n") == 1
    assert "Traceback" not in err


def test_check_json(capsys):
    code, out, err = run(capsys, "check", "--format", "json", "base")
    assert code == 0 and err == ""
    data = json.loads(out)
    assert isinstance(data, list) and len(data) == 1
    report = data[0]
    assert report["ok"] is True
    assert report["target"] == "base"
    assert report["findings"] == []
    assert report["dims"] == {"d_model": 512, "H": 8, "d_ff": 2048, "N": 6}
    assert report["choice_combinations"] == 1
    assert report["choices"]["head_dims"] == "split"


def test_check_json_with_findings_is_valid_json(capsys, tmp_path):
    path = tmp_path / "m.tspec"
    path.write_text('dim d "width"\ndim H "heads"\ndim d_k "head width"\nlet d_k = d / H\n')
    code, out, err = run(capsys, "check", "--format", "json", str(path))
    assert code == 1 and err == ""
    [report] = json.loads(out)
    assert report["ok"] is False
    assert report["choices"] is None
    [finding] = report["findings"]
    assert finding["kind"] == "not-integral"
    assert finding["counterexample"] == {"d": 1, "H": 2, "d_k": "1/2"}
    assert finding["line"] == 4


# P's equation takes T_dec rows where its claim, and Z's equation, has T
CONSEQUENCE = ('dim B "b"\ndim T "t"\ndim d "d"\ndim T_dec "t"\ndim L "rows"\n'
               'require T <= L\nrequire T_dec <= L\nparam P_table "L d"\ninput X "B T d"\n'
               'P "T d" = P_table[:T_dec]\nZ "B T d" = X + P\n')


def test_check_lists_consequences_beneath_their_cause(capsys, tmp_path):
    path = tmp_path / "m.tspec"
    path.write_text(CONSEQUENCE)
    code, out, err = run(capsys, "check", str(path))
    assert code == 1 and err == ""
    lines = out.splitlines()
    assert lines[1] == "   1 finding and 1 consequence (the spec as written)"
    assert lines[3] == (f"{path}:10: shape-mismatch: P is declared T d but its equation gives "
                        "T_dec d (axis 0)")
    assert lines[-3:] == [
        "    and 1 consequence, which follows from it:",
        (f"        {path}:11: operand-mismatch: add operands X (B T d) and P (T_dec d), "
         "axis -2: T vs T_dec"), ""]


def test_check_json_links_a_consequence_to_its_cause(capsys, tmp_path):
    path = tmp_path / "m.tspec"
    path.write_text(CONSEQUENCE)
    code, out, err = run(capsys, "check", "--format", "json", str(path))
    assert code == 1 and err == ""
    [report] = json.loads(out)
    assert [(f["line"], f["kind"], f["caused_by"]) for f in report["findings"]] == [
        (10, "shape-mismatch", None), (11, "operand-mismatch", 0)]


def test_shapes_base(capsys):
    code, out, err = run(capsys, "shapes", "base")
    assert code == 0 and err == ""
    lines = out.splitlines()
    # the choices the model consults (all but encoder_io), in the spec's order: those base.toml
    # sets as it sets them, the others at their first option, the default
    variant = api.load("base")
    assert variant.choices == {"arch": "encoder_decoder", "norm": "post", "activation": "relu",
                               "positional": "sinusoidal", "head_dims": "split"}
    shown = [f"{name}={variant.choices[name]}" if name in variant.choices else
             f"{name}={choice.options[0]} (default)"
             for name, choice in variant.spec.choices.items() if name != "encoder_io"]
    assert lines[:4] == [
        "== base (spec/variants/base.toml): spec transformer",
        "   choices: " + ", ".join(shown),
        ("   dims: d_model=512, H=8, d_ff=2048, N=6; d_k = d_model / H, d_v = d_model / H; "
         "symbolic: B, T, T_dec, V"),
        ""]
    lines = lines[4:]
    assert lines[0].split() == ["tensor", "role", "dtype", "symbolic", "shape", "concrete",
                                "shape"]
    assert set(lines[1]) == {"-", " "}
    rows = {columns(line)[0]: columns(line) for line in lines[2:]}
    assert rows["encoder.layers[i].self_attention.Q_h"] == [
        "encoder.layers[i].self_attention.Q_h", "intermediate", "float", "[H] B T d_k",
        "[8] B T 64"]
    assert rows["encoder.layers[i].self_attention.W_Q"] == [
        "encoder.layers[i].self_attention.W_Q", "param", "float", "d_model H*d_k", "512 512"]
    assert rows["logits"] == ["logits", "output", "float", "B T_dec V", "B T_dec V"]


def test_shapes_json(capsys):
    code, out, err = run(capsys, "shapes", "--format", "json", "base")
    assert code == 0 and err == ""
    rows = {row["name"]: row for row in json.loads(out)}
    assert rows["logits"]["symbolic"] == "B T_dec V"
    assert rows["logits"]["concrete"] == "B T_dec V"
    assert rows["logits"]["role"] == "output"


def test_shapes_with_set(capsys):
    code, out, _err = run(capsys, "shapes", "base", "--set", "H=16")
    assert code == 0
    assert out.splitlines()[2] == ("   dims: d_model=512, H=16, d_ff=2048, N=6; "
                                   "d_k = d_model / H, d_v = d_model / H; "
                                   "symbolic: B, T, T_dec, V")
    rows = {columns(line)[0]: columns(line) for line in out.splitlines()[6:]}
    assert rows["encoder.layers[i].self_attention.Q_h"][3:] == ["[H] B T d_k", "[16] B T 32"]


def test_shapes_of_a_bare_spec_says_its_choices_are_defaults(capsys):
    code, out, _err = run(capsys, "shapes", "transformer", "--set", "arch=decoder_only")
    assert code == 0
    # every choice but encoder_io (an encoder-only model's alone), in the spec's order, those
    # not set at their first option, the default
    shown = [f"{name}=decoder_only" if name == "arch" else f"{name}={c.options[0]} (default)"
             for name, c in api.load("transformer").spec.choices.items() if name != "encoder_io"]
    assert out.splitlines()[1] == "   choices: " + ", ".join(shown)


def test_list(capsys):
    code, out, err = run(capsys, "list")
    assert code == 0 and err == ""
    lines = out.splitlines()
    names = [line.split()[0] for line in lines if line.startswith("  ")]
    for name in ("transformer", "base", "big", "seed_004"):
        assert name in names
    assert lines[0] == "specs:"
    assert "variants:" in lines and "finding kinds:" in lines
    for kind in KINDS:
        assert kind in names


@pytest.mark.parametrize("setting, message", [
    ("H", "tspec: error: --set 'H': expected NAME=VALUE\n"),
    ("H=x", "tspec: error: --set H=x: dim values are positive integers, got 'x'\n"),
    ("Hx=3", ("tspec: error: --set Hx: unknown dim, choice or setting 'Hx' in spec transformer; did you "
             "mean 'H'?\n")),
])
def test_bad_set_is_a_usage_error(capsys, setting, message):
    code, out, err = run(capsys, "check", "base", "--set", setting)
    assert code == 2
    assert out == ""
    assert err == message


@pytest.mark.parametrize("argv, message", [
    ([], "tspec: error: the following arguments are required: COMMAND"),
    (["frobnicate"], "tspec: error: argument COMMAND: invalid choice: 'frobnicate'"),
    (["check", "--format", "xml"], "tspec: error: argument --format: invalid choice: 'xml'"),
    (["shapes"], "tspec: error: the following arguments are required: VARIANT"),
    (["check", "--bogus"], "tspec: error: unrecognized arguments: --bogus"),
])
def test_argparse_usage_errors_exit_2(capsys, argv, message):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("usage: tspec")
    assert message in err
    assert "Traceback" not in err


def test_spec_error_path_is_shown_relative_to_the_working_directory(capsys, tmp_path,
                                                                     monkeypatch):
    (tmp_path / "bad.tspec").write_text('dim B "batch"\ndim B "again"\n')
    monkeypatch.chdir(tmp_path)
    code, _out, err = run(capsys, "check", str(tmp_path / "bad.tspec"))
    assert code == 2
    assert err == "tspec: error: bad.tspec:2: dim B is declared twice (first at line 1)\n"


def test_deep_nesting_is_a_usage_error_not_a_crash(capsys, tmp_path):
    path = tmp_path / "deep.tspec"
    path.write_text('dim B "batch"\nrequire B <= ' + "(" * 1000 + "B" + ")" * 1000 + "\n")
    code, _out, err = run(capsys, "check", str(path))
    assert code == 2
    assert err == f"tspec: error: {path}:2:113: expression nests more than 100 levels deep\n"
    assert "Traceback" not in err


def test_huge_set_value_exits_2(capsys):
    code, _out, err = run(capsys, "check", "base", "--set", "H=" + "9" * 5000)
    assert code == 2
    assert err.startswith("tspec: error: --set H=")


def test_modulo_by_zero_exits_2(capsys, tmp_path):
    path = tmp_path / "mod.tspec"
    path.write_text('dim d "width"\nrequire d % 0 == 0\n')
    code, _out, err = run(capsys, "check", str(path))
    assert code == 2
    assert err == f"tspec: error: {path}:2:11: constraint: modulo by zero\n"


def test_malformed_spec_file_as_a_process(tmp_path):
    path = tmp_path / "broken.tspec"
    path.write_text('dim B "batch"\ninput X "B" = relu(\n')
    result = subprocess.run([sys.executable, "-m", "tspec", "check", str(path)],
                            capture_output=True, text=True, cwd=tmp_path, timeout=60,
                            check=False)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    assert result.stderr == ("tspec: error: broken.tspec:2:19: bracket opened here is never "
                             "closed (expected ')')\n")


def test_builtin_names_resolve_to_files():
    assert api.builtin_specs()["transformer"] == api.BUILTIN_SPEC
    assert set(api.builtin_variants()) >= {"base", "big"}


def test_shapes_of_a_variant_that_breaks_a_constraint_exits_1_without_a_table(capsys):
    code, out, err = run(capsys, "shapes", "base", "--set", "H=10")
    assert code == 1
    assert out == ""
    assert err.splitlines()[0] == (f"spec/transformer.tspec:{HEADS}: constraint-violated: "
                                   "d_model=512 is not divisible by H=10")


def test_a_spec_with_some_choices_set_is_proved_under_every_other_combination(capsys):
    code, out, _err = run(capsys, "check", "transformer", "--set", "norm=pre")
    assert code == 0
    choices = api.load("transformer").spec.choices
    others = math.prod(len(c.options) for name, c in choices.items() if name != "norm")
    assert f"({others} choice combinations)" in out


def test_a_reader_that_goes_away_gets_no_traceback():
    process = subprocess.Popen([sys.executable, "-m", "tspec", "check", "seed_004"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    first = process.stdout.readline()
    process.stdout.close()
    err = process.stderr.read().decode()
    process.wait(timeout=60)
    assert first.startswith(b"== seed_004")
    assert "Traceback" not in err
    # 1 (findings) when all the output fit in the pipe before the reader left, 141 when not
    assert process.returncode in (1, 141)


def test_audit_writes_where_told_and_check_finds_it_stale(capsys, tmp_path):
    target = tmp_path / "audit.md"
    code, out, err = run(capsys, "audit", "--out", str(target))
    assert (code, err) == (0, "")
    assert out == f"wrote {target}\n"
    assert target.read_text(encoding="utf-8").startswith("# Seed audit")
    assert run(capsys, "audit", "--check", "--out", str(target))[:2] == (0, f"{target} is current\n")
    target.write_text("old\n", encoding="utf-8")
    code, out, err = run(capsys, "audit", "--check", "--out", str(target))
    assert code == 1
    assert out.startswith(f"--- {target}\n+++ generated\n")
    assert err == f"tspec: {target} is stale; run `tspec audit`\n"


def test_audit_outside_a_checkout_needs_out(capsys, monkeypatch):
    monkeypatch.setattr(shipped, "checkout", lambda: None)
    code, out, err = run(capsys, "audit")
    assert (code, out) == (2, "")
    assert err == ("tspec: error: tspec is not running from a project checkout, so the report "
                   "has no default place: give --out PATH\n")


def test_a_reader_that_goes_away_ends_the_command_quietly_with_141():
    process = subprocess.Popen([sys.executable, "-m", "tspec", "list"], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()          # the reader is gone before anything is written
    err = process.stderr.read()
    assert process.wait() == 141
    assert err == b""


def test_write_atomic_leaves_the_old_file_whole_when_writing_fails(tmp_path, monkeypatch):
    from tspec import files
    target = tmp_path / "out.md"
    target.write_text("old\n", encoding="utf-8")

    def broken_replace(source, destination):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(files.os, "replace", broken_replace)
    with raises(UsageError, f"cannot write {target}: No space left on device"):
        files.write_atomic(target, "new\n")
    assert target.read_text(encoding="utf-8") == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.md"]   # no temporary left


def _manual_check_examples() -> list[tuple[list[str], list[str]]]:
    """The `tspec check` examples of the manual's "What `tspec check` tells you"
    (docs/manual/checking.md): each command's arguments and the lines it shows."""
    page = (ROOT / "docs" / "manual" / "checking.md").read_text()
    section = page.split("## What `tspec check` tells you", 1)[1].split("\n## ", 1)[0]
    examples = []
    for block in re.findall(r"```console\n(.*?)```", section, re.DOTALL):
        for command in re.split(r"\n(?=\$ )", block.rstrip("\n")):
            command, *shown = command.split("\n")
            if command.startswith("$ tspec check "):  # not the one that makes mine.tspec
                examples.append((command.removeprefix("$ tspec ").split(), shown))
    return examples


def _unnumbered(line: str) -> str:
    """A line of `tspec check`'s output with the line numbers of a spec as N: in a place
    (``mine.tspec:219:``) and in a message or hint (``lines 225, 228``, ``line 40``)."""
    line = re.sub(r"(\.tspec:)\d+", r"\1N", line)
    return re.sub(r"\b(lines?) \d+(?:(?:, | and )\d+)*", r"\1 N", line)


def test_the_manuals_check_examples_are_what_check_prints(capsys, tmp_path, monkeypatch):
    examples = _manual_check_examples()
    assert len(examples) == 4
    monkeypatch.chdir(ROOT)
    for argv, shown in examples:
        if "~/mine.tspec" in argv:
            # the built-in spec with the feed-forward weight W_1 declared d_ff d_ff, in the
            # home folder (shown as ~)
            lines = api.BUILTIN_SPEC.read_text().split("\n")
            at = builtin_line('param W_1 "d_model d_ff"') - 1
            lines[at] = lines[at].replace('"d_model d_ff"', '"d_ff d_ff"')
            (tmp_path / "mine.tspec").write_text("\n".join(lines))
            argv = [str(tmp_path / "mine.tspec") if a == "~/mine.tspec" else a for a in argv]
        code, out, err = run(capsys, *argv)
        assert code == 1 and err == ""
        # the spec's line numbers aside (the manual shows them as they were when it was
        # written, and lines added to the spec move them)
        printed = [_unnumbered(line.replace(str(tmp_path), "~")) for line in out.splitlines()]
        # every line shown is printed, in order; "..." stands for lines or a line's end left
        # out
        at = 0
        for line in map(_unnumbered, shown):
            if line == "...":
                continue
            head, cut, _ = line.partition("...")
            found = [i for i in range(at, len(printed))
                     if (printed[i].startswith(head) if cut else printed[i] == line)]
            assert found, (line, printed[at:at + 3])
            at = found[0] + 1


def test_the_manuals_commands_table_shows_every_option_of_every_command():
    # it left out tspec run's --backend (a new user's trial from the README found it); the
    # table is the manual's now (docs/manual/commands.md)
    page = (ROOT / "docs" / "manual" / "commands.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| `tspec ")]
    commands = next(a for a in cli._parser()._actions if a.dest == "command").choices
    for name, sub in commands.items():
        options = {o for a in sub._actions for o in a.option_strings
                   if o.startswith("--") and o != "--help"}
        cells = [re.split(r"(?<!\\)\|", row)[1] for row in rows
                 if re.match(rf"\| `tspec {name}\b", row)]
        assert cells, name
        assert set(re.findall(r"--[a-z][a-z-]*", " ".join(cells))) == options, name


def test_the_help_says_truly_which_commands_stop_at_a_time_limit(capsys):
    # it said every command but run stops at its time limit; generate and import had none,
    # and run none unless given one (issue 32): every command that reads a user's files has
    # the default check has
    parser = cli._parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    limited = {name: next((a.default for a in sub._actions if a.dest == "time_limit"), "none")
               for name, sub in commands.items()}
    assert limited == {"check": 60, "diff": 60, "shapes": 60, "docs": 60, "run": 60,
                       "list": "none", "generate": 60, "import": 60, "audit": "none"}
    assert parser.epilog == ("check, diff, shapes, docs, generate, import and run, which read "
                             "a user's files, stop at --time-limit (default 60 s) with an "
                             "error, exit 2; audit and list, which read only tspec's own, take "
                             "none.")
    assert "(check, diff,\nshapes, docs, generate, import and run) stops at its time limit" \
        in cli.__doc__


@pytest.mark.parametrize("argv, code, refused", [
    (["shapes", "{mine}"], 1, "the shapes listed are those declared, not proved"),
    (["check", "{mine}", "--grid", "N=2,4"], 1, "no combination judged"),
    (["run", "{mine}"], 1, "nothing to run"),
    (["docs", "{mine}", "--out", "{out}"], 1, "no documentation written"),
    (["generate", "{mine}", "--out", "{out}"], 1, "no code generated"),
])
def test_every_command_reports_a_dim_set_for_nothing_as_check_does(capsys, tmp_path, argv,
                                                                    code, refused):
    # H_kv without key_value_heads = grouped: check said "proved", and run built full
    # multi-head attention (W_K d_model x H*d_k) whatever H_kv said
    mine = tmp_path / "mine.toml"
    mine.write_text((ROOT / "spec" / "variants" / "base.toml").read_text().replace(
        "N = 6\n", "N = 6\nH_kv = 4\n"))
    said = "\n".join(findings_text(api.check(str(mine)).findings))
    assert said.startswith(f"{mine}:10: unused-dim: H_kv is set but unused: it is used under "
                           "key_value_heads = grouped\n    equation: H_kv = 4")
    got, _, err = run(capsys, *(a.format(mine=mine, out=tmp_path / "out") for a in argv))
    assert (got, err) == (code, f"{said}\ntspec: 1 finding in mine: {refused}\n")
    assert not (tmp_path / "out").exists()
    # diff's exit 1 says the two differ: it refuses in its one error line, exit 2, counting
    # each side's findings alike
    got, _, err = run(capsys, "diff", str(mine), "big", "--set", "T_past=3")
    assert (got, err) == (2, ("tspec: error: 2 findings in mine and 1 finding in big: nothing "
                             f"compared (the first: {mine}:10: unused-dim: H_kv is set but "
                             "unused: it is used under key_value_heads = grouped)\n"))


@pytest.mark.parametrize("command", ["generate", "import", "run"])
def test_every_command_that_reads_a_users_files_stops_at_its_time_limit(
        tmp_path, monkeypatch, capsys, command):
    # before: generate and import took no --time-limit (a usage error), run had none unless
    # given one; now each stops as check does, in one line, exit 2, nothing written
    import time

    import tspec.importing
    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 16, "n_head": 2,
        "n_layer": 1, "n_positions": 64, "vocab_size": 11}))
    imported = tspec.importing.from_hf

    def slowly(*args, **kwargs):                # a config that takes long to read
        time.sleep(30)
        return imported(*args, **kwargs)
    monkeypatch.setattr(tspec.importing, "from_hf", slowly)
    api.load("base")       # parsed already: a limit inside the parser is said as a bad token
    argv = {"generate": ["generate", "base", "--out", str(tmp_path / "out")],
            "import": ["import", str(tmp_path), "--out", str(tmp_path / "out.toml")],
            "run": ["run", "base"]}[command]
    code, out, err = run(capsys, *argv, "--time-limit", "0.05")
    assert (code, out) == (2, "")
    assert re.fullmatch(r"tspec: error: (.*: )?(the check|tspec \w+) stopped at its time limit "
                        r"of 0.05 s, [^\n]*; give it longer with --time-limit SECONDS\n", err), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]


CHAIN = ['spec chain "a chain"', 'dim B "batch"', 'dim d "width"', 'input X0 "B d" "x"',
         *(f'X{i} "B d" = relu(X{i - 1}) + X{i - 1}' for i in range(1, 200)), "output X199"]


def test_a_numpy_warning_is_one_line_said_once(tmp_path, capsys):
    # before: Python's two lines a warning (the cache's file name, then the source line), for
    # every statement that overflowed: X129's, X130's
    (tmp_path / "chain.tspec").write_text("\n".join(CHAIN) + "\n")
    (tmp_path / "chain.toml").write_text('spec = "chain.tspec"\n[dims]\nB = 2\nd = 3\n')
    code, _, err = run(capsys, "run", str(tmp_path / "chain.toml"))
    assert (code, err) == (0, ("tspec: warning: RuntimeWarning: overflow encountered in add, in "
                              "the generated code at X129 = rt.relu(X128) + X128  # B d\n"))


def test_a_warning_of_tspecs_own_code_names_its_file_and_line(monkeypatch, capsys):
    import warnings

    def warned(args):
        warnings.warn("a thing\nover two lines", UserWarning, stacklevel=1)
        return 0
    monkeypatch.setattr(cli, "_list", lambda: warned(None))
    assert run(capsys, "list") == (0, "", ("tspec: warning: UserWarning: a thing\\nover two "
                                          f"lines, at test_cli.py:{warned.__code__.co_firstlineno + 1}\n"))


def test_a_misspelt_built_in_name_gets_the_closest(capsys):
    # a misspelt dim or choice was answered "did you mean", a misspelt built-in name was not
    code, out, err = run(capsys, "check", "gpt2_smal")
    assert (code, out) == (2, "")
    assert err.startswith("tspec: error: no spec or variant named 'gpt2_smal': not a file, and "
                          "not a built-in (transformer, ")
    assert err.endswith("; did you mean 'gpt2_small'?\n")
    code, _, err = run(capsys, "check", "zzzz_qqqq")
    assert code == 2 and "did you mean" not in err


def test_list_lines_up_every_name_with_its_description(capsys):
    # transformer_base and transformer_big, longer than the column, ran into their text
    code, out, err = run(capsys, "list")
    assert (code, err) == (0, "")
    lines = out.split("finding kinds:")[0].splitlines()
    named = [line for line in lines if line.startswith("  ")]
    starts = {len(line) - len(line[2:].split(" ", 1)[1].lstrip()) for line in named}
    assert len(named) == len(api.builtin_specs()) + len(api.builtin_variants())
    assert starts == {2 + max(len(n) for n in [*api.builtin_specs(), *api.builtin_variants()])
                      + 1}
