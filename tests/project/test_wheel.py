"""The wheel: built from the checkout, installed outside it, it holds one import package,
tspec, with everything the code reads, and runs a committed generated model (about 10 s)."""

import json
import shutil
import site
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import numpy as np
import pytest
from support.command_line import ROOT

import tspec
from tspec.execution import weights
from tspec.generated.numpy import llama

TINY = ["d_model=16", "H=2", "H_kv=1", "N=1", "d_ff=8", "V=50"]     # llama3_8b, small
SOURCES = {"spec": "tspec", "codegen": "tspec/codegen", "generated": "tspec/generated"}

# run by the wheel's python in a folder outside the checkout
SCRIPT = """
import json, sys
import numpy as np
import tspec
from tspec.generated.numpy import llama
tiny = json.loads(sys.argv[1])
params = tspec.load_weights("llama3_8b", "weights.safetensors", tiny)
inputs = np.load("inputs.npz")
logits, probs = llama.transformer(inputs["u"], inputs["m"], params, H=2, H_kv=1, theta=5e5)
np.save("logits.npy", logits)
result = tspec.run("llama3_8b", tiny)
gone = []
for name in ("spec", "codegen", "generated"):
    try:
        __import__(name)
    except ModuleNotFoundError:
        gone.append(name)
print(json.dumps({"tspec": tspec.__file__, "model": llama.__file__, "gone": gone,
                  "run": list(result.outputs["logits"].shape)}))
"""


def build(tmp: Path) -> Path:
    """The wheel of a copy of the checkout's package sources (so that the build's own files,
    build/ and *.egg-info, land in the copy)."""
    source = tmp / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for folder in SOURCES:
        shutil.copytree(ROOT / folder, source / folder,
                        ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--no-index", "-q", "-w", str(tmp / "dist"), str(source)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = (tmp / "dist").glob("tspec-*.whl")
    return wheel


def install(wheel: Path, tmp: Path) -> Path:
    """A virtual environment outside the checkout with the wheel installed and no tspec else:
    the test environment's packages reach it through a .pth (what `--no-deps` leaves out)."""
    target = tmp / "venv"
    venv.create(target, with_pip=False)
    (purelib,) = target.glob("lib/python3*/site-packages")
    (purelib / "test_environment.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(target / "bin" / "python"),
                    "install", "--no-deps", "--no-index", "-q", str(wheel)],
                   check=True, capture_output=True, timeout=300)
    return target


@pytest.mark.slow
def test_the_wheel_installs_and_runs_a_generated_model(tmp_path):
    wheel = build(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    # before: spec/, codegen/, generated/ (without numpy/ and cupy/) and tspec.py
    dist_info = f"tspec-{tspec.__version__}.dist-info"
    assert {name.split("/")[0] for name in names} == {"tspec", dist_info}
    shipped = {name for name in names if name.startswith("tspec/")}
    sources = {f"{SOURCES[folder]}/{path.relative_to(ROOT / folder).as_posix()}"
               for folder in SOURCES for path in (ROOT / folder).rglob("*")
               if path.is_file() and "__pycache__" not in path.parts}
    assert shipped == sources                 # every source, template and data file, no other
    assert {"tspec/py.typed", "tspec/generated/numpy/llama.py", "tspec/transformer.tspec",
            "tspec/codegen/templates/module.py.j2"} <= shipped
    if (ROOT / "generated" / "numpy" / "_runtime.py").is_file():
        assert "tspec/generated/numpy/_runtime.py" in shipped
    metadata = zipfile.ZipFile(wheel).read(f"{dist_info}/METADATA")
    assert b"\nClassifier: Typing :: Typed\n" in metadata
    assert b"\nRequires-Python: >=3.11\n" in metadata

    environment = install(wheel, tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    variant = tspec.load("llama3_8b", TINY)
    params = weights.random_params(weights.expected_shapes(variant.spec, variant.choices,
                                                           variant.dims), seed=7)
    weights.save(work / "weights.safetensors", params)
    rng = np.random.default_rng(8)
    u, m = rng.integers(0, 50, (2, 6)), np.ones((2, 6), bool)
    np.savez(work / "inputs.npz", u=u, m=m)
    python = environment / "bin" / "python"
    done = subprocess.run([str(python), "-c", SCRIPT, json.dumps(TINY)], cwd=work,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    installed = environment.resolve()
    assert Path(shown["tspec"]).resolve().is_relative_to(installed)
    assert Path(shown["model"]).resolve().is_relative_to(installed)
    assert shown["gone"] == ["spec", "codegen", "generated"]
    assert shown["run"] == [2, 32, 50]                      # tspec run's B, T_dec and V
    # the installed model computes what the checkout's does, on the same weights and tokens
    expected, _ = llama.transformer(u, m, params, H=2, H_kv=1, theta=5e5)
    np.testing.assert_allclose(np.load(work / "logits.npy"), expected, rtol=1e-6, atol=1e-6)

    command = environment / "bin" / "tspec"
    version = subprocess.run([str(command), "--version"], cwd=work, capture_output=True,
                             text=True, timeout=60, check=False)
    assert (version.returncode, version.stdout) == (0, f"tspec {tspec.__version__}\n")
    generate = subprocess.run([str(command), "generate"], cwd=work, capture_output=True,
                              text=True, timeout=60, check=False)
    assert (generate.returncode, generate.stderr) == (2, (
        "tspec: error: tspec is not running from a project checkout, so generated code has no "
        "default place: give --out DIR\n"))
