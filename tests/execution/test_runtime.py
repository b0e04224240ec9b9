"""The runtime module of each backend (generated/<backend>/_runtime.py) and how models load it.

The helpers render once per backend into its runtime, which every model of the folder imports
as `rt` (a relative import: any generated folder is a package of its own, and a model needs no
tspec to run). Importing starts nothing: the pool and BLAS control start on first use. A model
imports on any OS (no `resource`, no `os.sysconf`), and refuses a runtime other than the one
it was generated with, saying to regenerate.
"""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support.refusals import raises

from tspec import api, cli
from tspec.codegen import generate
from tspec.codegen.generate import source
from tspec.execution import weights
from tspec.execution.loading import load_module, load_source

SPEC = api.read_spec(api.BUILTIN_SPEC)
GENERATED = api.checkout() / "generated"
CHECKOUT = api.checkout()
DECODER = {"d_model": 8, "H": 2, "d_ff": 12, "N": 1, "V": 11}


def decoder_forward(module) -> np.ndarray:
    """A small forward of a decoder-only model (its logits)."""
    params = weights.random_params(weights.expected_shapes(SPEC, {"arch": "decoder_only"},
                                                           DECODER), 0, np.float32)
    u = np.random.default_rng(0).integers(0, 11, (2, 5))
    logits, _ = module.transformer(u, np.ones((2, 5), dtype=bool), params, H=2)
    return logits


def run_python(script: str, **environment) -> str:
    """Run a script in a fresh interpreter at the checkout; its standard output."""
    shown = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           check=False, cwd=CHECKOUT, env={**os.environ, **environment})
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


# ---------------------------------------------------------------------------------------------
# One runtime per backend

@pytest.mark.parametrize("backend", ["numpy", "cupy"])
def test_each_folder_has_one_runtime_whose_version_is_the_hash_of_its_text(backend):
    text = (GENERATED / backend / "_runtime.py").read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    stated = [line for line in lines if line.startswith("VERSION = ")]
    assert len(stated) == 1
    version = hashlib.sha256("".join(line for line in lines if line not in stated)
                             .encode()).hexdigest()[:16]
    assert stated[0] == (f'VERSION = "{version}"  # of this runtime: the sha256 of its text '
                         "without this line\n")
    for model in sorted((GENERATED / backend).glob("[!_]*.py")):
        text = model.read_text(encoding="utf-8")
        assert "\nfrom . import _runtime as rt\n" in text, model.name
        assert f'\nrt.require_version("{version}", __name__)' in text, model.name
        assert "\ndef softmax(" not in text and "\ndef typechecked(" not in text   # no copies


def test_the_runtime_is_a_function_of_the_backend_alone():
    """Every helper, whichever ops a model uses: one runtime serves every model."""
    runtime = generate.runtime_source("numpy")
    for name in ("project", "softmax", "gelu", "gelu_tanh", "silu", "rms_norm", "rotary",
                 "repeat_heads", "relative_position_bias", "extend", "query_blocks",
                 "check_cache", "require_memory", "in_parallel"):
        assert f"\ndef {name}(" in runtime, name
    cupy = generate.runtime_source("cupy")
    for name in ("masked_softmax", "batched_matmul", "layer_norm"):
        assert f"\ndef {name}(" in cupy, name
    assert "\ndef query_blocks(" not in cupy and "\ndef extend(" in cupy   # NumPy's alone; both
    assert generate.files(("numpy",))["numpy/_runtime.py"] == runtime


def test_a_generated_folder_is_a_package_that_runs_without_tspec(tmp_path):
    """`tspec generate --out DIR` writes each backend's folder whole: its models run from it
    (a plain import, the folder's parent on sys.path) with nothing of tspec imported."""
    assert cli.main(["generate", "--backend", "numpy", "--out", str(tmp_path / "models")]) == 0
    assert sorted(p.name for p in (tmp_path / "models" / "numpy").iterdir()) == [
        "__init__.py", "_runtime.py", "bert.py", "decoder_only.py", "encoder_decoder.py",
        "encoder_only.py", "llama.py"]
    script = (f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n"
              "import numpy as np\n"
              "from models.numpy import decoder_only, encoder_only\n"
              "assert decoder_only.rt is encoder_only.rt\n"
              "rng = np.random.default_rng(0)\n"
              "shapes = {'E': (11, 8), 'W_out': (8, 11)}\n"
              "params = {k: rng.standard_normal(s).astype(np.float32) "
              "for k, s in shapes.items()}\n"
              "layer = {'self_attention': {k: rng.standard_normal((8, 8)).astype(np.float32) "
              "for k in ('W_Q', 'W_K', 'W_V', 'W_O')},\n"
              "         'norm_1': {'gamma': np.ones(8, np.float32), "
              "'beta': np.zeros(8, np.float32)},\n"
              "         'feed_forward': {'W_1': np.ones((8, 12), np.float32), "
              "'b_1': np.zeros(12, np.float32), 'W_2': np.ones((12, 8), np.float32), "
              "'b_2': np.zeros(8, np.float32)}}\n"
              "layer['norm_2'] = layer['norm_1']\n"
              "params['decoder'] = {'layers': [layer]}\n"
              "u = rng.integers(0, 11, (2, 5))\n"
              "logits, probs = decoder_only.transformer(u, np.ones((2, 5), bool), params, H=2)\n"
              "assert probs.shape == (2, 5, 11)\n"
              "print(sorted({m.split('.')[0] for m in sys.modules} & {'tspec', 'spec', "
              "'codegen', 'jinja2', 'sympy'}))\n")
    assert run_python(script) == "[]\n"


# ---------------------------------------------------------------------------------------------
# Nothing starts at import

def test_importing_a_model_starts_nothing_and_its_first_forward_starts_the_pool():
    """Importing a model leaves the threads as they were and BLAS uncontrolled; the first
    forward starts both. (A fresh interpreter: the runtime there is imported for the first
    time; two BLAS threads, so that there is a pool, and query blocks of one row, so that it
    has work.)"""
    script = (f"import threading, sys\nsys.path[:0] = [{str(CHECKOUT / 'tests')!r}, "
              f"{str(CHECKOUT / 'tests' / 'execution')!r}]\n"
              "import test_runtime\n"
              "from tspec.execution.loading import load_module\n"
              "before = threading.active_count()\n"
              f"model = load_module({str(GENERATED / 'numpy' / 'decoder_only.py')!r})\n"
              "rt = model.rt\n"
              "print(threading.active_count() - before, rt.BLAS, rt.WORKERS, rt.POOL)\n"
              "rt.QUERY_BLOCK = 1\n"
              "test_runtime.decoder_forward(model)\n"
              "print(threading.active_count() > before, rt.BLAS is not None, rt.WORKERS, "
              "rt.POOL._max_workers)\n")
    assert run_python(script, OPENBLAS_NUM_THREADS="2", OMP_NUM_THREADS="2") == (
        "0 None None None\nTrue True 2 1\n")


def test_a_pool_size_set_before_the_first_use_is_kept():
    model = load_module(GENERATED / "numpy" / "decoder_only.py", private=True)
    assert (model.rt.BLAS, model.rt.WORKERS, model.rt.POOL) == (None, None, None)
    model.rt.WORKERS = 3
    logits = decoder_forward(model)
    assert model.rt.WORKERS == 3 and model.rt.POOL._max_workers == 2
    assert model.rt.BLAS is not None
    np.testing.assert_array_equal(logits, decoder_forward(load_module(
        GENERATED / "numpy" / "decoder_only.py")))       # the numbers of any pool


# ---------------------------------------------------------------------------------------------
# Unix-only calls guarded

def test_a_model_imports_and_runs_without_resource_or_sysconf():
    """As on Windows: no `resource` module and no os.sysconf. The default memory limit is then
    unknown (memory_total() None, as weights.memory_bytes()), and only a MEMORY_LIMIT set is
    checked."""
    script = ("import os, sys\nsys.modules['resource'] = None\ndel os.sysconf\n"
              f"sys.path[:0] = [{str(CHECKOUT / 'tests')!r}, "
              f"{str(CHECKOUT / 'tests' / 'execution')!r}]\n"
              "import importlib, test_runtime\n"
              "from tspec.execution import weights\n"
              "model = importlib.import_module('tspec.generated.numpy.decoder_only')\n"
              "logits = test_runtime.decoder_forward(model)\n"
              "print(model.rt.resource, model.rt.memory_total(), weights.memory_bytes(), "
              "logits.shape)\n"
              "model.MEMORY_LIMIT = 1000\n"
              "try:\n    test_runtime.decoder_forward(model)\n"
              "except MemoryError as error:\n    print(str(error).split(':')[0])\n")
    assert run_python(script) == (
        "None None None (2, 5, 11)\n"
        "transformer would allocate about 0.0 GiB for its tensors, more than MEMORY_LIMIT "
        "(0.0 GiB)\n")


# ---------------------------------------------------------------------------------------------
# The version check

def test_a_model_beside_another_runtime_refuses_to_import_saying_to_regenerate(tmp_path):
    folder = tmp_path / "numpy"
    folder.mkdir()
    model = (GENERATED / "numpy" / "decoder_only.py").read_text(encoding="utf-8")
    (folder / "decoder_only.py").write_text(model, encoding="utf-8")
    runtime = generate.runtime_source("numpy")
    ours = runtime.split('VERSION = "', 1)[1][:16]
    edited = runtime.replace(f'VERSION = "{ours}"', 'VERSION = "0123456789abcdef"') + \
        "# edited\n"
    (folder / "_runtime.py").write_text(edited, encoding="utf-8")
    with raises(ImportError, f"decoder_only was generated with runtime {ours}, but its "
                             "_runtime.py is 0123456789abcdef: regenerate both with tspec "
                             "generate"):
        load_module(folder / "decoder_only.py")
    (folder / "_runtime.py").write_text(runtime, encoding="utf-8")       # regenerated
    assert load_module(folder / "decoder_only.py").rt.VERSION == ours


def test_fresh_code_runs_on_the_runtime_rendered_with_it(tmp_path):
    """load_source writes a model beside the runtime the templates render now, whatever the
    committed one is; text made with a runtime no template renders is refused plainly."""
    module = load_source(source(SPEC, {"arch": "decoder_only"}))
    assert Path(module.rt.__file__).read_text(encoding="utf-8") == \
        generate.runtime_source("numpy")
    assert Path(module.__file__).parent == Path(module.rt.__file__).parent
    assert module.rt is load_source(source(SPEC, {"arch": "encoder_only"})).rt
    stale = source(SPEC, {}).replace(module.rt.VERSION, "0123456789abcdef")
    with raises(ImportError, "this code was generated with runtime 0123456789abcdef, which "
                             "this tspec does not render: generate it again"):
        load_source(stale)


# ---------------------------------------------------------------------------------------------
# Loading: shared, tagged, private, type-checked

def test_the_models_of_a_folder_share_its_runtime_and_a_tag_or_private_load_gets_its_own():
    path = GENERATED / "numpy"
    decoder, encoder = load_module(path / "decoder_only.py"), load_module(path / "encoder_only.py")
    assert decoder.rt is encoder.rt
    assert decoder is not load_module(path / "decoder_only.py")      # each load runs it anew
    tagged = load_module(path / "decoder_only.py", tag="another")
    assert tagged.rt is not decoder.rt and tagged.rt is load_module(path / "bert.py",
                                                                   tag="another").rt
    private = load_module(path / "decoder_only.py", private=True)
    assert private.rt is not decoder.rt
    assert private.rt is not load_module(path / "decoder_only.py", private=True).rt


def test_a_type_checked_load_checks_the_runtime_helpers_too():
    """A gain of the wrong width broadcasts silently in the plain runtime; the type-checked
    one (its own, imported with TSPEC_TYPECHECK=1) refuses it."""
    x = np.ones((2, 3, 4))
    checked = load_module(GENERATED / "numpy" / "encoder_only.py", typecheck=True)
    plain = load_module(GENERATED / "numpy" / "encoder_only.py")
    assert checked.rt is not plain.rt
    assert plain.rt.layer_norm(x, np.ones(1), np.zeros(4), 1e-5).shape == (2, 3, 4)
    with pytest.raises(TypeError, match="typechecking parameter 'gamma'"):
        checked.rt.layer_norm(x, np.ones(1), np.zeros(4), 1e-5)
