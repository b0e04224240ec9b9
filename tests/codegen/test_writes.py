"""What tspec writes: every file of a run whole and new, or every one old (staged beside its
target, then renamed in, the renamed ones put back after a failure), with the mode of the file
it replaces (a new one the umask's), never outside the folder it was told to write in, and
with no temporary file left that a dead process made. And what it reads: a user's file only
when it is a regular file, within its limit before it is read."""

import contextlib
import dataclasses
import errno
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.command_line import ROOT, run
from support.refusals import raises

from tspec import api, files
from tspec.cli import main
from tspec.codegen import generate
from tspec.docs import site as docs
from tspec.errors import CodegenError, SpecError, SpecSyntaxError, UsageError
from tspec.execution import weights
from tspec.files import inside, write_atomic, write_files


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


# -- every file of a run, or none: a failure at any step

OLD = {"a.md": ("old a\n", 0o644), "sub/b.md": ("old b\n", 0o444), "x.py": ("old x\n", 0o700)}
NEW = {"a.md": "new a\n", "sub/b.md": "new b\n", "x.py": "new x\n", "c.md": "new c\n",
       "new/deeper/d.md": "new d\n"}
STEPS = ("mkdir", "open", "fchmod", "close", "link", "replace")   # os's, and files._write


def tree(root: Path) -> dict[str, tuple]:
    """Every file and folder under root: its text and mode (a folder: None and its mode)."""
    found = {}
    for path in sorted(root.rglob("*")):
        mode = path.lstat().st_mode & 0o7777
        found[path.relative_to(root).as_posix()] = (
            None if path.is_dir() else path.read_text(), mode)
    return found


def old_tree(root: Path) -> Path:
    for relative, (text, mode) in OLD.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
        (root / relative).chmod(mode)
    return root


@contextlib.contextmanager
def faults(at=(), error=lambda: OSError(errno.ENOSPC, "No space left on device")):
    """Count the file-system steps of writing (STEPS, and files._write), failing those whose
    numbers are in ``at``; yields the names of the steps as they are taken."""
    taken = []
    with pytest.MonkeyPatch.context() as patch:
        def counted(module, name):
            real = getattr(module, name)

            def step(*args, **kwargs):
                if name == "open" and not args[1] & os.O_CREAT:    # reading: not a write step
                    return real(*args, **kwargs)
                taken.append(name)
                if len(taken) - 1 in at:
                    if name == "close":
                        real(*args, **kwargs)
                    raise error()
                return real(*args, **kwargs)
            patch.setattr(module, name, step)
        for name in STEPS:
            counted(os, name)
        counted(files, "_write")
        yield taken


@pytest.fixture
def umask_022():
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def test_every_step_of_a_write_is_counted(tmp_path, umask_022):
    counted = old_tree(tmp_path)
    with faults() as taken:
        write_files(NEW, root=counted)
    # two folders made; five files staged (three with their old file's mode) and renamed in,
    # the three old files kept aside by a hard link until then
    assert sorted(taken) == sorted(["mkdir"] * 2 + ["open", "_write", "close", "replace"] * 5
                                   + ["fchmod", "link"] * 3)
    assert tree(tmp_path) == {
        "a.md": ("new a\n", 0o644), "c.md": ("new c\n", 0o644), "new": (None, 0o755),
        "new/deeper": (None, 0o755), "new/deeper/d.md": ("new d\n", 0o644),
        "sub": (None, 0o755), "sub/b.md": ("new b\n", 0o444), "x.py": ("new x\n", 0o700)}


@pytest.mark.parametrize("error", [lambda: OSError(errno.ENOSPC, "No space left on device"),
                                   KeyboardInterrupt], ids=["full-disk", "ctrl-c"])
def test_a_failure_at_any_step_leaves_every_file_old_and_nothing_else(tmp_path, error,
                                                                      umask_022):
    # before: each file was renamed in as soon as it was written, so a failure at the third
    # left the first two new (base.md new, base.html old), and a mode of 444 or 700 became 644
    counted = old_tree(tmp_path / "count")
    with faults() as taken:
        write_files(NEW, root=counted)
    before = tree(old_tree(tmp_path / "expected"))
    for number, name in enumerate(taken):
        root = old_tree(tmp_path / f"at{number}")
        with faults({number}, error), pytest.raises(UsageError if error is not
                                                     KeyboardInterrupt else KeyboardInterrupt):
            write_files(NEW, root=root)
        assert tree(root) == before, f"failure at step {number} ({name})"


def test_a_failure_names_the_file_it_reached(tmp_path):
    root = old_tree(tmp_path)
    with faults({0}), raises(UsageError, f"cannot write {root / 'sub/b.md'}: No space left on "
                                         "device"):
        # the first step: creating sub/b.md's staged file
        write_files({"sub/b.md": "new b\n"}, root=root)


def test_what_a_roll_back_cannot_put_back_is_said_and_kept(tmp_path):
    root = old_tree(tmp_path / "root")
    counted = old_tree(tmp_path / "count")
    with faults() as taken:
        write_files({"a.md": "1\n", "x.py": "2\n"}, root=counted)
    second = [n for n, name in enumerate(taken) if name == "replace"][1]     # x.py's
    first_back = second + 1          # the roll-back's first step: a.md's old file put back
    with faults({second, first_back}), pytest.raises(UsageError) as caught:
        write_files({"a.md": "1\n", "x.py": "2\n"}, root=root)
    backup, = [p for p in root.iterdir() if p.name.startswith(".a.md.tspec-old-")]
    assert str(caught.value) == (f"cannot write {root / 'x.py'}: No space left on device; and "
                                 f"could not put back {root / 'a.md'} (its old text is in "
                                 f"{backup})")
    assert backup.read_text() == "old a\n"
    assert (root / "x.py").read_text() == "old x\n"


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from(["a", "b", "s/a", "s/t/b", "t/c"]),
                       st.tuples(st.sampled_from([None, "old"]),
                                 st.sampled_from([0o600, 0o644, 0o444, 0o755])), min_size=1),
       st.integers(0, 60), st.booleans())
def test_any_files_any_failure_all_old_or_all_new(tmp_path_factory, files_drawn, fail_at,
                                                  interrupt):
    """Drawn files (new ones, and old ones with their modes, in nested folders) and a failure
    at a drawn step: afterwards every file is old (the failure came first) or every one new
    (the write had finished), modes kept, and nothing else in the folder."""
    root = tmp_path_factory.mktemp("drawn")
    for name, (old, mode) in files_drawn.items():
        if old is not None:
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(f"old {name}\n")
            (root / name).chmod(mode)
    before = tree(root)
    contents = {name: f"new {name}\n" for name in files_drawn}
    error = KeyboardInterrupt if interrupt else \
        (lambda: OSError(errno.EIO, "Input/output error"))
    try:
        with faults({fail_at}, error):
            write_files(contents, root=root)
        failed = False
    except (UsageError, KeyboardInterrupt):
        failed = True
    after = tree(root)
    if failed:
        assert after == before
    else:
        assert {name: after[name] for name in contents} == {
            name: (f"new {name}\n", before.get(name, (None, 0o666 & ~_umask()))[1])
            for name in contents}
        assert all(after[name][0] is None for name in set(after) - set(contents))  # folders


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@pytest.mark.parametrize("module, options", [(docs, ([], "all")), (generate, ((),))])
def test_docs_and_generate_write_every_file_or_none(tmp_path, monkeypatch, module, options):
    old = {name: files.headed(name, text) for name, text in (
        ("base.md", "d_model 512\n"), ("base.html", "<p>d_model 512</p>\n"), ("index.md", "i\n"),
        ("numpy/model.py", "d_model = 512\n"))}
    for name, text in old.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    new = {name: text.replace("512", "768") for name, text in old.items()}
    monkeypatch.setattr(module, "files", lambda *args, **kwargs: new)
    with faults() as taken:
        module.write(tmp_path, *options)
    replaces = [number for number, name in enumerate(taken) if name == "replace"]
    assert len(replaces) == len(new)
    for number in replaces:
        for name, text in old.items():
            (tmp_path / name).write_text(text)
        with faults({number}), pytest.raises(UsageError):
            module.write(tmp_path, *options)
        assert {name: (tmp_path / name).read_text() for name in old} == old


def test_without_hard_links_the_old_file_is_kept_as_a_copy(tmp_path, monkeypatch):
    def no_links(*args, **kwargs):
        raise OSError(errno.EPERM, "Operation not permitted")
    monkeypatch.setattr(os, "link", no_links)
    root = old_tree(tmp_path / "root")
    before = tree(root)
    counted = old_tree(tmp_path / "count")
    with faults() as taken:
        write_files({"a.md": "1\n", "x.py": "2\n"}, root=counted)
    with faults({[n for n, name in enumerate(taken) if name == "replace"][1]}), \
            pytest.raises(UsageError):
        write_files({"a.md": "1\n", "x.py": "2\n"}, root=root)
    assert tree(root) == before
    write_files({"a.md": "1\n", "x.py": "2\n"}, root=root)
    assert tree(root) == {**before, "a.md": ("1\n", 0o644), "x.py": ("2\n", 0o700)}


def test_a_full_disk_part_way_through_docs_leaves_every_page_old(tmp_path):
    # the case: base.md said d_model 768 and base.html 512. RLIMIT_FSIZE lets the
    # Markdown pages (35 KB) through and refuses the HTML page (165 KB): EFBIG
    for folder, d_model in (("a", 512), ("b", 768)):
        (tmp_path / folder).mkdir()
        text = (api.SPEC_DIR / "variants" / "base.toml").read_text()
        (tmp_path / folder / "base.toml").write_text(
            text.replace("d_model = 512", f"d_model = {d_model}"))
    out = tmp_path / "out"
    assert main(["docs", str(tmp_path / "a" / "base.toml"), "--out", str(out)]) == 0
    old = {path.name: path.read_bytes() for path in out.iterdir()}
    assert sorted(old) == ["base.html", "base.md", "index.html", "index.md"]
    assert len(old["base.md"]) < 100_000 < len(old["base.html"])

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))
    done = subprocess.run([sys.executable, "-m", "tspec", "docs",
                           str(tmp_path / "b" / "base.toml"), "--out", str(out)],
                          capture_output=True, cwd=ROOT, preexec_fn=limit, timeout=300, check=False)
    assert (done.returncode, done.stdout) == (2, b"")
    assert done.stderr.decode() == f"tspec: error: cannot write {out / 'base.html'}: File too " \
                                   "large\n"
    assert {path.name: path.read_bytes() for path in out.iterdir()} == old


# -- modes and links

def test_regeneration_keeps_each_files_mode(tmp_path, umask_022):
    # before: 444 and 700 became 644
    out = tmp_path / "generated"
    assert main(["generate", "--backend", "numpy", "--out", str(out)]) == 0
    (out / "numpy" / "bert.py").chmod(0o444)
    (out / "numpy" / "llama.py").chmod(0o700)
    assert main(["generate", "--backend", "numpy", "--out", str(out)]) == 0
    modes = {path.name: path.stat().st_mode & 0o777 for path in (out / "numpy").iterdir()}
    assert modes == {"__init__.py": 0o644, "_runtime.py": 0o644, "bert.py": 0o444,
                     "decoder_only.py": 0o644,
                     "encoder_decoder.py": 0o644, "encoder_only.py": 0o644,
                     "llama.py": 0o700}


def test_a_hard_link_to_a_written_file_keeps_the_old_text(tmp_path):
    # what the README says: a file is replaced by a rename, never written in place
    (tmp_path / "a.md").write_text("old\n")
    os.link(tmp_path / "a.md", tmp_path / "elsewhere.md")
    write_atomic(tmp_path / "a.md", "new\n")
    assert ((tmp_path / "a.md").read_text(), (tmp_path / "elsewhere.md").read_text()) == \
        ("new\n", "old\n")


def test_a_folder_where_the_file_goes_is_refused_and_kept(tmp_path):
    (tmp_path / "a.md").mkdir()
    with raises(UsageError, f"cannot write {tmp_path / 'a.md'}: Is a directory"):
        write_files({"b.md": "b\n", "a.md": "a\n"}, root=tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["a.md"]


def test_a_device_or_named_pipe_where_the_file_goes_is_refused_and_kept(tmp_path, capsys):
    # before: replaced by a regular file (`audit --out /dev/null` run as root would replace
    # /dev/null; a named pipe stands in for it here)
    os.mkfifo(tmp_path / "audit.md")
    assert run(capsys, "audit", "--out", str(tmp_path / "audit.md")) == (
        2, "", (f"tspec: error: cannot write {tmp_path / 'audit.md'}: a named pipe, not a "
               "regular file\n"))
    assert os.listdir(tmp_path) == ["audit.md"] and (tmp_path / "audit.md").is_fifo()


def test_a_name_near_the_systems_limit_is_written(tmp_path):
    # before: the temporary name (".NAME." and 8 more characters) passed the 255 bytes a name
    # may have: "File name too long" for a file the system takes
    name = "é" * 123 + ".md"                # 249 bytes
    write_atomic(tmp_path / name, "old\n")
    write_atomic(tmp_path / name, "new\n")
    assert os.listdir(tmp_path) == [name] and (tmp_path / name).read_text() == "new\n"


def test_two_names_for_one_file_are_refused(tmp_path):
    (tmp_path / "sub").mkdir()
    with raises(UsageError, f"cannot write {tmp_path / 'b.md'} and "
                            f"{tmp_path / 'sub/../b.md'}: they are one file"):
        write_files({"b.md": "1\n", "sub/../b.md": "2\n"}, root=tmp_path)
    assert os.listdir(tmp_path) == ["sub"]


# -- temporary files that dead processes left

PAUSED_WRITER = """
import os, sys
from tspec import files
real = os.replace
def paused(source, target):
    print("staged", flush=True)
    sys.stdin.readline()
    real(source, target)
os.replace = paused
files.write_files({sys.argv[1]: "from the other process\\n"})
"""


def paused_writer(path: Path) -> subprocess.Popen:
    """A process that stages ``path`` and waits, before renaming it in, for a line."""
    process = subprocess.Popen([sys.executable, "-c", PAUSED_WRITER, str(path)], cwd=ROOT,
                               text=True,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert process.stdout.readline() == "staged\n"
    return process


def test_a_killed_writers_temporary_file_is_removed_by_the_next_write(tmp_path):
    # before: `.encoder_only.py.XXXX` stayed for good
    process = paused_writer(tmp_path / "a.md")
    staged, = os.listdir(tmp_path)
    assert re.fullmatch(rf"\.a\.md\.tspec-new-[0-9a-f]{{8}}-{process.pid}-[0-9a-f]{{8}}",
                        staged)
    process.send_signal(signal.SIGKILL)
    process.wait()
    write_atomic(tmp_path / "b.md", "b\n")
    assert os.listdir(tmp_path) == ["b.md"]


def test_a_live_writers_temporary_file_is_left_alone(tmp_path):
    process = paused_writer(tmp_path / "a.md")
    try:
        write_atomic(tmp_path / "b.md", "b\n")
        assert len(os.listdir(tmp_path)) == 2
    finally:
        process.communicate("\n", timeout=60)
    assert process.returncode == 0
    assert sorted(os.listdir(tmp_path)) == ["a.md", "b.md"]
    assert (tmp_path / "a.md").read_text() == "from the other process\n"


def test_only_this_machines_dead_processes_files_are_removed(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    machine, token = files._machine(), "0123abcd"
    other = "ffffffff" if machine != "ffffffff" else "00000000"
    names = {f".a.md.tspec-new-{machine}-{dead.pid}-{token}": False,
             f".a.md.tspec-old-{machine}-{dead.pid}-{token}": False,
             f".a.md.tspec-new-{other}-{dead.pid}-{token}": True,       # another machine's
             f".a.md.tspec-new-{machine}-{os.getpid()}-{token}": True,  # a live process's
             f".a.md.tspec-new-{machine}-{dead.pid}-{token}x": True,    # not tspec's name
             ".a.md.x1y2z3w4": True, "a.md": True}
    for name in names:
        (tmp_path / name).write_text("x\n")
    assert sorted(files.remove_stale(tmp_path)) == sorted(
        tmp_path / name for name, kept in names.items() if not kept)
    assert sorted(os.listdir(tmp_path)) == sorted(n for n, kept in names.items() if kept)


# -- docs pages: one page per variant, none named as the index

@pytest.mark.parametrize("targets, message", [
    (["a/base.toml", "b/base.toml", "index.toml"],
     ("a/base.toml and b/base.toml would both be written as base.md and base.html; docs pages "
     "are named after their variants: rename one")),
    (["a/base.toml", "index.toml"],
     ("index.toml would be written as index.md and index.html, the index of the pages; docs "
     "pages are named after their variants: rename it")),
    (["a/base.toml", "a/base.toml"], "a/base.toml is given twice"),
    (["a/Base.toml", "b/base.toml", "--format", "md"],
     ("a/Base.toml and b/base.toml would be written as Base.md and base.md, one file where case "
     "is ignored; docs pages are named after their variants: rename one")),
])
def test_pages_that_would_be_one_file_are_refused_before_any_is_written(
        tmp_path, monkeypatch, capsys, targets, message):
    # before: `docs a/base.toml b/base.toml index.toml` wrote 2 pages for 3 variants, the
    # index over index.toml's page
    for name in ("a/base.toml", "a/Base.toml", "b/base.toml", "index.toml"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text('spec = "transformer"\n')
    monkeypatch.chdir(tmp_path)
    for check in ([], ["--check"]):
        assert run(capsys, "docs", *targets, "--out", "out", *check) == (
            2, "", f"tspec: error: {message}\n")
    assert not (tmp_path / "out").exists()


# -- what tspec reads: regular files, within their limits, read only after they are checked

RESCUER = """
import os, sys, time
time.sleep(float(sys.argv[2]))
while True:
    try:
        os.close(os.open(sys.argv[1], os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass
    time.sleep(0.1)
"""


@contextlib.contextmanager
def unblocked(fifo: Path, seconds: float = 20):
    """Fail instead of hanging: a reader still waiting at a named pipe after ``seconds`` is let
    go by a writer that opens it and closes it at once, again and again, so that the reader
    sees an empty file. The writer is a process of its own: a library may wait holding the
    GIL (safetensors does)."""
    rescuer = subprocess.Popen([sys.executable, "-c", RESCUER, str(fifo), str(seconds)])
    start = time.monotonic()
    try:
        yield
    finally:
        rescuer.kill()
        rescuer.wait()
    assert time.monotonic() - start < seconds, f"waited at {fifo} until let go"


def test_a_variants_spec_that_is_no_spec_says_which_variant_named_it(tmp_path):
    # before: "/etc/hostname:1:3: expected '=' ...", and nothing of the variant
    (tmp_path / "hostname").write_text("myhost\n")
    (tmp_path / "v.toml").write_text('# mine\nspec = "hostname"\n')
    with raises(SpecSyntaxError, f"{tmp_path / 'hostname'}:1:7: expected '=' (an equation) or a "
                           f"keyword, found end of line (read as the spec of "
                           f"{tmp_path / 'v.toml'}:2)"):
        api.load(tmp_path / "v.toml")


def test_a_variants_spec_past_the_limit_is_refused_before_it_is_read(tmp_path):
    # before: read whole first (a terabyte: MemoryError), and nothing of the variant
    with open(tmp_path / "huge.tspec", "wb") as huge:
        huge.truncate(1 << 40)                  # sparse: no disk space
    (tmp_path / "v.toml").write_text('spec = "huge.tspec"\n')
    with raises(SpecError, f"{tmp_path / 'v.toml'}:1: spec = 'huge.tspec': "
                                       f"{tmp_path / 'huge.tspec'}: spec is {1 << 40} bytes; "
                                       "the limit is 1000000"):
        api.load(tmp_path / "v.toml")


@pytest.mark.parametrize("named", ["/dev/zero", "fifo.tspec", "."])
def test_a_variants_spec_that_is_not_a_file_says_which_variant_named_it(tmp_path, named):
    os.mkfifo(tmp_path / "fifo.tspec")
    (tmp_path / "v.toml").write_text(f'spec = "{named}"\n')
    path = named if named.startswith("/") else tmp_path / named
    with unblocked(tmp_path / "fifo.tspec"), \
            raises(UsageError, f"{tmp_path / 'v.toml'}:1: spec = '{named}': "
                                        f"{path} is not a file"):
        api.load(tmp_path / "v.toml")


def test_a_variant_that_is_a_named_pipe_is_refused_without_waiting(tmp_path):
    # before: it waited for a writer for ever
    path = tmp_path / "v.toml"
    os.mkfifo(path)
    with unblocked(path), raises(UsageError, f"cannot read {path}: a named pipe, not a "
                                             "regular file"):
        api.load(path)


def test_a_variant_that_is_a_device_is_refused_without_reading(tmp_path):
    # before: /dev/zero was read until memory ran out (here: 4 GiB of address space, a
    # MemoryError); a process of its own, so that no test can take the machine's memory
    (tmp_path / "v.toml").symlink_to("/dev/zero")

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    done = subprocess.run([sys.executable, "-m", "tspec", "check", "v.toml"], cwd=tmp_path,
                          capture_output=True, text=True, preexec_fn=limit, timeout=120,
                          check=False)
    assert (done.returncode, done.stderr) == (
        2, "tspec: error: cannot read v.toml: a character device, not a regular file\n")


@pytest.mark.parametrize("suffix", [".npz", ".safetensors"])
def test_weights_that_are_a_named_pipe_are_refused_without_waiting(tmp_path, suffix):
    path = tmp_path / f"w{suffix}"
    os.mkfifo(path)
    with unblocked(path), raises(UsageError, f"cannot read {path}: a named pipe, not a "
                                             "regular file"):
        weights.load(path, {"E": (2, 2)})


def test_weights_are_saved_whole(tmp_path):
    params = {"E": weights.np.ones((2, 2), dtype="float32")}
    for suffix in (".npz", ".safetensors"):
        path = tmp_path / f"w{suffix}"
        path.write_text("old\n")
        with faults({1}), pytest.raises(UsageError):    # the write of the staged file
            weights.save(path, params)
        assert path.read_text() == "old\n"
        weights.save(path, params)
        assert (weights.load(path, {"E": (2, 2)})["E"] == 1).all()
    assert sorted(os.listdir(tmp_path)) == ["w.npz", "w.safetensors"]


def test_a_named_pipe_among_the_pages_is_stale_without_waiting(tmp_path, capsys):
    out = tmp_path / "docs"
    out.mkdir()
    os.mkfifo(out / "base.md")
    with unblocked(out / "base.md"):
        code, _, err = run(capsys, "docs", "base", "--format", "md", "--out", str(out),
                           "--check")
    assert (code, err) == (1, f"tspec: documentation in {out} is stale; run `tspec docs`\n")


def test_a_spec_file_reads_as_text_does(tmp_path):
    # the spec is read as bytes now (to check its size first): its newlines as before
    text = (api.BUILTIN_SPEC).read_text()
    (tmp_path / "crlf.tspec").write_bytes(text.replace("\n", "\r\n").encode())
    assert api.read_spec(tmp_path / "crlf.tspec").text_hash == \
        api.read_spec(api.BUILTIN_SPEC).text_hash



def test_a_failed_write_puts_back_a_symbolic_link_it_replaced(tmp_path):
    def links(root: Path) -> Path:
        root.mkdir()
        (root / "dangling.md").symlink_to("nowhere")
        (root / "real.md").write_text("real\n")
        (root / "linked.md").symlink_to("real.md")
        return root
    contents = {"dangling.md": "1\n", "linked.md": "2\n", "new.md": "3\n"}
    counted = links(tmp_path / "count")
    with faults() as taken:
        write_files(contents, root=counted)
    assert taken.count("link") == 2
    for number in range(len(taken)):
        root = links(tmp_path / f"at{number}")
        with faults({number}), pytest.raises(UsageError):
            write_files(contents, root=root)
        assert sorted(os.listdir(root)) == ["dangling.md", "linked.md", "real.md"]
        assert (os.readlink(root / "dangling.md"), os.readlink(root / "linked.md"),
                (root / "real.md").read_text()) == ("nowhere", "real.md", "real\n")


# -- what tspec may replace: its own files alone, for every command that writes (issue 32)

MINE = "# my own file\n"
NOT_MINE = ("tspec did not write this file (it does not begin with tspec's header), so it is "
            "not replaced; move it away, or give --force to replace it")
TINY = ('spec = "transformer"\n[dims]\nd_model = 16\nH = 2\nd_ff = 24\nN = 1\nV = 11\n'
        'max_len = 8\n[choices]\narch = "encoder_only"\npositional = "learned"\n')
GPT2_CONFIG = {
    "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
    "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 64, "n_embd": 16, "n_head": 2,
    "n_layer": 1, "n_positions": 64, "vocab_size": 11}


def test_generate_replaces_a_users_module_and_runtime_only_when_forced(tmp_path, capsys):
    # before: `generate --out DIR` replaced a user's own NAME.py and _runtime.py without a word
    (tmp_path / "tiny.toml").write_text(TINY)
    out = tmp_path / "models"
    out.mkdir()
    for name in ("tiny.py", "_runtime.py"):
        (out / name).write_text(MINE)
    argv = ["generate", str(tmp_path / "tiny.toml"), "--out", str(out)]
    assert run(capsys, *argv) == (
        2, "", f"tspec: error: {out / 'tiny.py'}: {NOT_MINE} (and 1 more such file)\n")
    assert sorted(os.listdir(out)) == ["_runtime.py", "tiny.py"]
    assert {(out / name).read_text() for name in os.listdir(out)} == {MINE}
    code, said, err = run(capsys, *argv, "--force")
    assert (code, err) == (0, "")
    assert said == "".join(f"wrote {out / name}\n" for name in ("__init__.py", "tiny.py",
                                                                 "_runtime.py"))
    # now they are tspec's: written again without --force
    assert run(capsys, *argv)[0] == 0
    assert all((out / name).read_text().startswith(files.HEADERS[".py"])
               for name in ("__init__.py", "tiny.py", "_runtime.py"))


def test_docs_replaces_a_users_index_and_pages_only_when_forced(tmp_path, monkeypatch, capsys):
    # before: `docs --out .` replaced index.html, index.md and NAME.md without a word
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.toml").write_text(TINY)
    for name in ("index.html", "index.md", "tiny.md"):
        (tmp_path / name).write_text(MINE)
    assert run(capsys, "docs", "tiny.toml", "--out", ".") == (
        2, "", f"tspec: error: tiny.md: {NOT_MINE} (and 2 more such files)\n")
    assert sorted(os.listdir(tmp_path)) == ["index.html", "index.md", "tiny.md", "tiny.toml"]
    assert run(capsys, "docs", "tiny.toml", "--out", ".", "--force")[0] == 0
    assert run(capsys, "docs", "tiny.toml", "--out", ".")[0] == 0     # tspec's own now


@pytest.mark.parametrize("first", [
    "# Generated by tspec\n", "<!-- Generated by tspec -->\n",
    files.HEADERS[".md"].replace("edit.", "edit"), " " + files.HEADERS[".md"],
    "mine\n" + files.HEADERS[".md"], "# Imported by tspec import from x\n",
    "# Seed audit\n"])
def test_a_file_that_merely_mentions_tspec_is_not_taken_for_its_own(tmp_path, first):
    path = tmp_path / "a.md"
    path.write_text(first + "my notes\n")
    with raises(UsageError, f"{path}: {NOT_MINE}"):
        files.write_outputs({path: files.headed(path, "new\n")})
    assert path.read_text() == first + "my notes\n"


@pytest.mark.parametrize("name, text", [
    ("a.md", files.headed("a.md", "old\n")), ("a.html", files.headed("a.html", "old\n")),
    ("a.py", files.headed("a.py", "old\n")), ("a.toml", "# Imported by `tspec import` from x\n"),
    ("a.md", files.AUDIT_SIGNATURE + "old\n")])
def test_a_file_tspec_wrote_is_replaced(tmp_path, name, text):
    (tmp_path / name).write_text(text)
    new = files.headed(name, "new\n") if name != "a.toml" else text + "new\n"
    files.write_outputs({tmp_path / name: new})
    assert (tmp_path / name).read_text() == new


def test_a_symbolic_link_is_never_written_through(tmp_path):
    # decided: refused, naming it; with --force the link itself is replaced, its target kept
    (tmp_path / "theirs.md").write_text(files.headed("theirs.md", "someone's page\n"))
    (tmp_path / "a.md").symlink_to("theirs.md")
    with raises(UsageError, f"{tmp_path / 'a.md'}: a symbolic link to theirs.md, which tspec "
                            "does not write through; move it away, or give --force to replace "
                            "the link itself"):
        files.write_outputs({"a.md": files.headed("a.md", "new\n")}, root=tmp_path)
    assert os.readlink(tmp_path / "a.md") == "theirs.md"
    files.write_outputs({"a.md": files.headed("a.md", "new\n")}, root=tmp_path, force=True)
    assert not (tmp_path / "a.md").is_symlink()
    assert (tmp_path / "a.md").read_text() == files.headed("a.md", "new\n")
    assert (tmp_path / "theirs.md").read_text() == files.headed("theirs.md", "someone's page\n")


def test_what_tspec_writes_carries_its_signature():
    # the one writer refuses to write a file it could not later know for its own
    with pytest.raises(AssertionError, match="without its signature"):
        files.write_outputs({"/nonexistent/a.md": "no header\n"})


@pytest.mark.parametrize("command", ["generate", "generate VARIANT", "docs", "audit", "import"])
def test_every_command_that_writes_refuses_a_users_file(tmp_path, monkeypatch, capsys, command):
    # one writer for every command: the same refusal, the file as it was
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.toml").write_text(TINY)
    (tmp_path / "config.json").write_text(json.dumps(GPT2_CONFIG))
    argv, target = {
        "generate": (["generate", "--backend", "numpy", "--out", "out"], "out/numpy/__init__.py"),
        "generate VARIANT": (["generate", "tiny.toml", "--out", "out"], "out/tiny.py"),
        "docs": (["docs", "tiny.toml", "--format", "md", "--out", "out"], "out/tiny.md"),
        "audit": (["audit", "--out", "out/audit.md"], "out/audit.md"),
        "import": (["import", "config.json", "--out", "out/gpt2.toml"], "out/gpt2.toml")}[command]
    (tmp_path / target).parent.mkdir(parents=True)
    (tmp_path / target).write_text(MINE)
    code, said, err = run(capsys, *argv)
    assert (code, said) == (2, "")
    assert re.fullmatch(rf"tspec: error: {re.escape(target)}: {re.escape(NOT_MINE)}"
                        r"( \(and \d+ more such files?\))?\n", err), err
    assert (tmp_path / target).read_text() == MINE
    assert run(capsys, *argv, "--force")[0] == 0
    assert (tmp_path / target).read_text() != MINE


# -- a user's variant is written where the user is, never into the checkout unasked

def test_a_users_variant_is_written_in_the_working_directory(tmp_path, monkeypatch, capsys):
    # before: run from a user's own folder, `tspec docs my.toml` and `tspec generate my.toml`
    # wrote into the project's folders (docs rewrote the shipped docs/variants/index.md and
    # index.html to a one-variant index, and `tspec docs --check` then failed)
    checkout = {path: path.read_bytes() for folder in ("docs/variants", "generated/numpy")
                for path in (ROOT / folder).iterdir()}
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my.toml").write_text(TINY)
    assert run(capsys, "docs", "my.toml") == (0, "".join(
        f"wrote {name}\n" for name in ("my.md", "index.md", "my.html", "index.html")), "")
    assert run(capsys, "generate", "my.toml") == (0, "".join(
        f"wrote {name}\n" for name in ("__init__.py", "my.py", "_runtime.py")), "")
    # and a built-in with --set is the user's too
    assert run(capsys, "docs", "base", "--set", "N=2", "--format", "md") == (
        0, ("wrote base+N=2.md\nnot written: index.md, which lists 1 variant this run did not "
           "document (my); document all of them in one run to write it\n"), "")
    assert {path: path.read_bytes() for folder in ("docs/variants", "generated/numpy")
            for path in (ROOT / folder).iterdir()} == checkout


def test_a_partial_run_leaves_the_index_of_pages_it_did_not_build(tmp_path, capsys):
    # before: `tspec docs base` rewrote the index of every shipped page as one of base alone
    shipped = tmp_path / "variants"
    shutil.copytree(ROOT / "docs" / "variants", shipped)
    before = {path.name: path.read_bytes() for path in shipped.iterdir()}
    assert run(capsys, "docs", "base", "--out", str(shipped)) == (0, (
        f"wrote {shipped / 'base.md'}\nwrote {shipped / 'base.html'}\nnot written: index.md "
        "and index.html, which list 9 variants this run did not document (bert_base, big, "
        "gpt2_large and 6 more); document all of them in one run to write them\n"), "")
    assert {path.name: path.read_bytes() for path in shipped.iterdir()} == before
    assert run(capsys, "docs", "base", "--out", str(shipped), "--check") == (
        0, f"{shipped} is current\n", "")


def test_an_index_is_rewritten_only_by_a_run_of_every_page_it_lists(tmp_path, capsys):
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.toml").write_text(TINY.replace("d_ff = 24", f"d_ff = {ord(name)}"))
    out = tmp_path / "out"
    paths = [str(tmp_path / f"{name}.toml") for name in ("a", "b", "c")]
    assert run(capsys, "docs", *paths[:2], "--out", str(out), "--format", "md")[0] == 0
    index = (out / "index.md").read_text()
    assert run(capsys, "docs", paths[0], "--out", str(out), "--format", "md") == (0, (
        f"wrote {out / 'a.md'}\nnot written: index.md, which lists 1 variant this run did not "
        "document (b); document all of them in one run to write it\n"), "")
    assert (out / "index.md").read_text() == index
    assert run(capsys, "docs", *paths, "--out", str(out), "--format", "md")[0] == 0
    assert "[c.md](c.md)" in (out / "index.md").read_text()


def test_a_variant_with_set_gets_a_page_of_its_own(tmp_path, capsys):
    # before: `docs gpt2_small --set N=2` wrote gpt2_small.md, the shipped page's name, beside
    # "Published: 124,439,808 parameters ... Counted here: 39,396,864 (-68.34%)"
    out = tmp_path / "out"
    for setting in ("N=2", "eps=1e-6"):
        assert run(capsys, "docs", "gpt2_small", "--set", setting, "--format", "md", "--out",
                   str(out))[0] == 0
        assert (out / f"gpt2_small+{setting}.md").read_text().startswith(
            f"{files.HEADERS['.md']}# gpt2_small+{setting}: GPT-2 small")
    assert "Published" not in (out / "gpt2_small+N=2.md").read_text()
    # a setting that changes no dim or choice: the published model still, compared
    assert ("Published: 124,439,808 parameters" in (out / "gpt2_small+eps=1e-6.md").read_text())
    assert sorted(os.listdir(out)) == ["gpt2_small+N=2.md", "gpt2_small+eps=1e-6.md",
                                       "index.md"]


def test_a_set_page_name_is_safe_as_a_file_name():
    name = docs.page_name(api.load("base", ["norm=pre", "eps=1e-6",
                                            *(f"{dim}={'9' * 40}" for dim in ("N", "V", "d_ff"))]))
    assert name.startswith("base+") and len(name.encode()) <= 120
    assert re.fullmatch(r"[A-Za-z0-9._+=-]+", name)
    assert docs.page_name(api.load("base", ["norm=pre", "eps=1e-6"])) == "base+norm=pre+eps=1e-6"
    assert docs.page_name(api.load("base")) == "base"


# -- import --out, written as every file is (issue 32, item 4)

def test_import_out_that_fails_leaves_the_old_file_whole(tmp_path, capsys):
    # before: the file was truncated to 0 bytes when the write failed
    (tmp_path / "config.json").write_text(json.dumps(GPT2_CONFIG))
    target = tmp_path / "gpt2.toml"
    old = "# Imported by `tspec import` from before\nspec = \"transformer\"\n"
    target.write_text(old)
    with faults({1}):              # the staged file's write: a full disk
        code, said, err = run(capsys, "import", str(tmp_path), "--out", str(target))
    assert (code, said, err) == (2, "", (f"tspec: error: cannot write {target}: No space left "
                                        "on device\n"))
    assert target.read_text() == old and sorted(os.listdir(tmp_path)) == ["config.json",
                                                                        "gpt2.toml"]


def test_import_out_to_a_named_pipe_is_refused_without_waiting(tmp_path, capsys):
    # before: it waited for a reader for ever
    (tmp_path / "config.json").write_text(json.dumps(GPT2_CONFIG))
    fifo = tmp_path / "out.toml"
    os.mkfifo(fifo)
    with unblocked(fifo):
        assert run(capsys, "import", str(tmp_path), "--out", str(fifo)) == (
            2, "", f"tspec: error: cannot write {fifo}: a named pipe, not a regular file\n")
    assert fifo.is_fifo()


def test_import_out_never_writes_through_a_symbolic_link(tmp_path, capsys):
    # before: it wrote through the link into its target
    (tmp_path / "config.json").write_text(json.dumps(GPT2_CONFIG))
    (tmp_path / "elsewhere.toml").write_text(MINE)
    link = tmp_path / "gpt2.toml"
    link.symlink_to(tmp_path / "elsewhere.toml")
    assert run(capsys, "import", str(tmp_path), "--out", str(link)) == (
        2, "", (f"tspec: error: {link}: a symbolic link to {tmp_path / 'elsewhere.toml'}, which "
               "tspec does not write through; move it away, or give --force to replace the "
               "link itself\n"))
    assert run(capsys, "import", str(tmp_path), "--out", str(link), "--force") == (
        0, f"wrote {link}\n", "")
    assert not link.is_symlink() and (tmp_path / "elsewhere.toml").read_text() == MINE
    assert link.read_text().startswith("# Imported by `tspec import` from ")
