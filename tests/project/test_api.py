"""The package's public API, `tspec.NAME`: a light import, names that are the api's and not
its modules, and the code generation, run and weights calls."""

import ast
import importlib
import pkgutil
import subprocess
import sys
import types

import numpy as np
import pytest
from support.command_line import ROOT
from support.refusals import raises
from support.specs import builtin_line

import tspec
from tspec.execution import weights

# lines of the built-in spec, found by their text
HEADS = builtin_line("require d_model % H == 0")

TINY = ["N=1", "d_model=16", "H=2", "d_ff=8", "V=50"]    # gpt2_small, small enough to run


def test_import_tspec_is_light():
    # before: `import spec` imported the whole checker (sympy, NumPy) to define its names
    script = ("import sys, tspec; print(tspec.__version__, sorted(m for m in sys.modules "
              "if m.split('.')[0] in ('sympy', 'numpy', 'jinja2') or m.startswith('tspec.')))")
    shown = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           cwd=ROOT.parent, timeout=60, check=True)
    # tspec.moved, the finder of old import paths, imports the standard library alone
    assert shown.stdout == f"{tspec.__version__} ['tspec.moved']\n"


def test_api_names_are_the_api_and_not_its_modules():
    """A submodule named like an api function would hide it once imported (importing
    ``tspec.X`` sets the package's attribute X, so ``__getattr__`` never runs): with every
    submodule imported, each public name is still what its module defines."""
    for found in pkgutil.walk_packages(tspec.__path__, "tspec."):
        try:
            importlib.import_module(found.name)
        except ModuleNotFoundError as missing:        # the CuPy modules without CuPy
            assert (missing.name, found.name.startswith("tspec.generated.cupy.")) == ("cupy", True)
    for name in tspec.__all__:
        value = getattr(tspec, name)
        assert not isinstance(value, types.ModuleType), name
        assert value is getattr(importlib.import_module(tspec._API[name]), name)
    assert set(tspec.__all__) <= set(dir(tspec))
    with pytest.raises(AttributeError, match="^module 'tspec' has no attribute 'nothing'$"):
        tspec.nothing  # noqa: B018


def test_the_names_typing_sees_are_the_names_that_load():
    """The TYPE_CHECKING imports (what a type checker and an editor see), ``__all__`` and the
    table ``__getattr__`` imports from name the same things in the same modules."""
    tree = ast.parse((ROOT / "spec" / "__init__.py").read_text())
    (block,) = [node for node in tree.body if isinstance(node, ast.If)
                and ast.unparse(node.test) == "TYPE_CHECKING"]
    typed = {alias.name: node.module for node in block.body for alias in node.names}
    assert typed == tspec._API
    assert tspec.__all__ == sorted(typed)


def test_source_is_what_generate_writes():
    assert tspec.source("llama3_8b") == (ROOT / "generated" / "numpy" / "llama.py").read_text()
    assert tspec.source("bert_base", ["N=2"], backend="cupy") == \
        (ROOT / "generated" / "cupy" / "bert.py").read_text()
    with raises(tspec.UsageError, "unknown backend 'jax'; backends: numpy, cupy"):
        tspec.source("base", backend="jax")


def test_run_gives_the_model_outputs_at_the_run_sizes():
    result = tspec.run("gpt2_small", TINY, seed=3)
    assert (result.sizes["B"], result.sizes["T_dec"], result.sizes["V"]) == (2, 32, 50)
    logits, probs = result.outputs["logits"], result.outputs["probs"]
    assert logits.shape == probs.shape == (2, 32, 50)
    exp = np.exp(logits.astype(np.float64) - logits.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(probs, exp / exp.sum(axis=-1, keepdims=True), atol=1e-6)
    again = tspec.run("gpt2_small", TINY, seed=3).outputs["logits"]
    assert np.array_equal(again, logits)
    assert not np.array_equal(tspec.run("gpt2_small", TINY, seed=4).outputs["logits"], logits)


def test_run_refuses_a_variant_with_findings(monkeypatch):
    monkeypatch.chdir(ROOT)
    with raises(tspec.FindingsError, "1 finding in base: nothing to run (the first: "
                f"spec/transformer.tspec:{HEADS}: constraint-violated: d_model=512 is not "
                "divisible by H=10)"):
        tspec.run("base", ["H=10"])


def test_decode_agrees_with_the_full_forward():
    result = tspec.decode("gpt2_small", 4, TINY)
    assert (result.prompt, result.steps, len(result.step_seconds)) == (28, 4, 4)
    assert result.cache == [("decoder.layers.0.self_attention.K_past", (2, 2, 32, 8)),
                            ("decoder.layers.0.self_attention.V_past", (2, 2, 32, 8))]
    assert result.difference <= result.tolerance


@pytest.mark.parametrize("suffix", [".safetensors", ".npz"])
def test_load_weights_reads_them_as_the_generated_code_takes_them(tmp_path, suffix):
    variant = tspec.load("gpt2_small", TINY)
    shapes = weights.expected_shapes(variant.spec, variant.choices, variant.dims)
    params = weights.random_params(shapes, seed=5)
    path = tmp_path / f"w{suffix}"
    weights.save(path, params)
    loaded = tspec.load_weights("gpt2_small", path, TINY)
    assert np.array_equal(loaded["decoder"]["layers"][0]["self_attention"]["W_Q"],
                          params["decoder"]["layers"][0]["self_attention"]["W_Q"])
    flat = weights.flatten(loaded)
    assert list(flat) == list(shapes)
    assert all(np.array_equal(flat[name], array)
               for name, array in weights.flatten(params).items())
    with raises(tspec.WeightsError, f"{path}: parameter E has shape (50, 16); the spec "
                "expects (60, 16)"):
        tspec.load_weights("gpt2_small", path, [*TINY[:-1], "V=60"])


def test_every_call_that_needs_a_proved_model_refuses_one_with_findings_alike(monkeypatch):
    # grid said "0 combinations" and "proved once", shapes returned the declared shapes, and
    # source returned code compile refused: each now raises as run does
    monkeypatch.chdir(ROOT)
    said = ("1 finding in base: {} (the first: spec/variants/base.toml: unused-dim: H_kv is "
            "set but unused: it is used under key_value_heads = grouped)")
    for call, refused in ((lambda: tspec.grid("base", {"N": [2, 4]}, ["H_kv=4"]),
                           "no combination judged"),
                          (lambda: tspec.shapes("base", ["H_kv=4"]), "no shapes listed"),
                          (lambda: tspec.source("base", ["H_kv=4"]), "no code generated"),
                          (lambda: tspec.compile("base", ["H_kv=4"]), "no code generated"),
                          (lambda: tspec.run("base", ["H_kv=4"]), "nothing to run")):
        with raises(tspec.FindingsError, said.format(refused)):
            call()
    assert len(tspec.shapes("base", ["H_kv=4"], proved=False)) > 100


def test_a_built_in_name_is_the_built_in_whatever_the_folder_holds(tmp_path, monkeypatch):
    # a folder ./llama3_8b holding a config.json took the built-in's place without a word
    (tmp_path / "llama3_8b").mkdir()
    (tmp_path / "llama3_8b" / "config.json").write_text(
        '{"model_type": "gpt2", "n_layer": 1, "n_embd": 16, "n_head": 2}')
    monkeypatch.chdir(tmp_path)
    assert tspec.load("llama3_8b").choices["positional"] == "rotary"
    assert tspec.load("./llama3_8b").choices["positional"] == "learned"


# issue 32: the API's misuses were raw errors (a TypeError comparing 'a' with 0), and NumPy's
# integers and dtypes were not taken
@pytest.mark.parametrize("options, message", [
    ({"seed": "a"}, "--seed must be a non-negative integer, got 'a'"),
    ({"seed": -1}, "--seed must be a non-negative integer, got -1"),
    ({"dtype": 5}, "a run's dtype is float16, float32 or float64, not 5"),
    ({"dtype": "float8"}, "a run's dtype is float16, float32 or float64, not 'float8'"),
    ({"dtype": None}, "a run's dtype is float16, float32 or float64, not None"),
    ({"dtype": "int32"}, "a run's dtype is float16, float32 or float64, not 'int32'"),
    ({"max_memory": "x"}, "--max-memory must be a positive number of bytes, got 'x'"),
    ({"weights_path": 42}, "a weights path is a str or a path object, got int 42"),
])
def test_run_refuses_options_of_the_wrong_kind_with_its_own_error(options, message):
    with raises(tspec.UsageError, message):
        tspec.run("gpt2_small", TINY, **options)


def test_run_and_decode_take_numpy_integers_and_dtypes():
    result = tspec.run("gpt2_small", TINY, seed=np.int64(1), dtype=np.float64,
                       max_memory=np.int64(1 << 34))
    assert result.outputs["logits"].dtype == np.float64
    assert tspec.decode("gpt2_small", np.int32(2), TINY, dtype=np.dtype("float32")).steps == 2
    with raises(tspec.UsageError, "--decode takes a number of steps, got 'a'"):
        tspec.decode("gpt2_small", "a", TINY)


def test_a_setting_past_a_float_s_range_in_a_variant_file_is_refused(tmp_path):
    path = tmp_path / "v.toml"
    path.write_text('spec = "transformer"\n[settings]\neps = 1' + "0" * 400 + "\n")
    with raises(tspec.VariantError, f"{path}:3: [settings] eps: settings are positive finite "
                                    "numbers, got ~1.000e400"):
        tspec.load(path)
