"""What `tspec generate` writes: the built-in Transformer's three architectures, BERT's
encoder-only model and a Llama-style decoder, per backend (generated/numpy/, generated/cupy/).

Each architecture's file is rendered from the spec under that architecture with the seeds'
defaults for every other choice; BERT's under the choices of BertModel (the bert_base
variant's), Llama's under those of the llama3_8b variant. Byte-identical on every run,
headed by the spec's name and content hash. Beside them, each backend's folder holds its
runtime, _runtime.py, the helpers every model there calls: each folder is a package of its own.
"""

from pathlib import Path

from tspec import api
from tspec.codegen.backends import BACKENDS
from tspec.codegen.backends import backend as backend_named
from tspec.codegen.lowering.lower import lower
from tspec.codegen.rendering.render import render, render_runtime
from tspec.files import inside, stale_diff, write_files
from tspec.language.model import Spec

# generated/<backend>/<name>.py: the choices each file is generated under
BUILTIN_MODELS: dict[str, dict[str, str]] = {
    "encoder_decoder": {"arch": "encoder_decoder"},
    "encoder_only": {"arch": "encoder_only"},
    "decoder_only": {"arch": "decoder_only"},
    "bert": {"arch": "encoder_only", "encoder_io": "bert", "activation": "gelu",
             "positional": "learned", "attention_bias": "all"},
    "llama": {"arch": "decoder_only", "norm": "pre", "activation": "swiglu",
              "positional": "rotary", "normalization": "rms_norm", "key_value_heads": "grouped",
              "feed_forward_bias": "none"},
}


def source(spec: Spec, choices: dict[str, str], backend: str = "numpy") -> str:
    """The generated module's text for a spec under some choices."""
    return render(lower(spec, choices, backend_named(backend)))


def files(backends: tuple[str, ...] = tuple(BACKENDS)) -> dict[str, str]:
    """Every generated file for some backends (default: all): relative path -> text."""
    spec = api.read_spec(api.BUILTIN_SPEC)
    out = {}
    for backend in backends:
        out[f"{backend}/__init__.py"] = (f'"""Generated forward code for {backend}: one module '
                                         'per architecture of the built-in Transformer, '
                                         'BERT and Llama."""\n')
        for name, choices in BUILTIN_MODELS.items():
            out[f"{backend}/{name}.py"] = source(spec, choices, backend)
        out[f"{backend}/_runtime.py"] = runtime_source(backend)
    return out


def runtime_source(backend: str = "numpy") -> str:
    """The text of a backend's runtime module, _runtime.py."""
    return render_runtime(backend_named(backend))


def default_dir() -> Path:
    return api.in_checkout("generated", "generated code", "--out DIR")


def write(out: Path, backends: tuple[str, ...] = tuple(BACKENDS)) -> list[Path]:
    """Write every generated file, or none (``spec.files.write_files``)."""
    texts = files(backends)                 # every file made before any is written
    write_files(texts, root=out)
    return [out / relative for relative in texts]


def stale(out: Path, backends: tuple[str, ...] = tuple(BACKENDS)) -> str:
    """A unified diff of every file that differs from what generation gives; '' when none."""
    return "".join(stale_diff(inside(out, relative), text)
                   for relative, text in files(backends).items())
