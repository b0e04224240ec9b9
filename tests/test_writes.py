"""What tspec writes: whole files or none (temporary file + rename), with the umask's
permissions, and never outside the folder it was told to write in."""

import dataclasses
import os
from pathlib import Path

import pytest

from codegen import docs, generate
from spec import api
from spec.cli import main
from spec.errors import CodegenError, UsageError
from spec.files import inside, write_atomic


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "model.py"
    path.write_text("old\n")
    with pytest.raises(UnicodeEncodeError):
        write_atomic(path, "new text, then a lone surrogate \udc80 that cannot be encoded")
    assert path.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["model.py"]


def test_an_interrupted_rename_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "model.py"
    path.write_text("old\n")

    def interrupted(source, target):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_atomic(path, "new\n")
    assert path.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["model.py"]


def test_written_files_get_the_umasks_permissions(tmp_path):
    previous = os.umask(0o027)
    try:
        write_atomic(tmp_path / "a.py", "x = 1\n")
    finally:
        os.umask(previous)
    assert (tmp_path / "a.py").stat().st_mode & 0o777 == 0o640


@pytest.mark.parametrize("relative", ["../outside.py", "/etc/outside.py", "a/../../outside.py",
                                      ".", "a/.."])
def test_a_path_outside_the_output_folder_is_refused(tmp_path, relative):
    out = tmp_path / "out"
    with pytest.raises(UsageError) as caught:
        write_atomic(relative, "x = 1\n", root=out)
    assert str(caught.value) == f"{out / relative} lies outside {out}, where tspec writes; refused"
    assert not (tmp_path / "outside.py").exists()


def test_a_symbolic_link_out_of_the_output_folder_is_refused(tmp_path):
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / "numpy").symlink_to(elsewhere)
    with pytest.raises(UsageError) as caught:
        inside(out, "numpy/model.py")
    assert str(caught.value) == (f"{out / 'numpy' / 'model.py'} lies outside {out}, where "
                                 "tspec writes; refused")
    assert inside(out, "cupy/model.py") == out / "cupy" / "model.py"


def test_the_cli_refuses_to_generate_through_a_link_out_of_its_folder(tmp_path, capsys):
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / "numpy").symlink_to(elsewhere)
    assert main(["generate", "--backend", "numpy", "--out", str(out)]) == 2
    assert capsys.readouterr().err == (f"tspec: error: {out / 'numpy' / '__init__.py'} lies "
                                       f"outside {out}, where tspec writes; refused\n")
    assert os.listdir(elsewhere) == []


def test_a_variant_named_out_of_the_docs_folder_is_refused(tmp_path):
    variant = dataclasses.replace(api.load("base"), name="../escaped")
    out = tmp_path / "docs"
    with pytest.raises(UsageError) as caught:
        docs.write(out, [variant], "md")
    assert str(caught.value) == (f"{out / '../escaped.md'} lies outside {out}, where tspec "
                                 "writes; refused")
    assert not (tmp_path / "escaped.md").exists()


def test_generation_that_fails_writes_no_file(tmp_path, monkeypatch):
    made = []
    real = generate.source

    def third_fails(spec, choices, backend="numpy"):
        made.append(choices)
        if len(made) == 3:
            raise CodegenError("a construct code generation lacks")
        return real(spec, choices, backend)

    monkeypatch.setattr(generate, "source", third_fails)
    with pytest.raises(CodegenError):
        generate.write(tmp_path, ("numpy",))
    assert len(made) == 3
    assert list(Path(tmp_path).iterdir()) == []
