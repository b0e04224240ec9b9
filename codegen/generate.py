"""What `tspec generate` writes: the built-in Transformer's three architectures, BERT's
encoder-only model and a Llama-style decoder, per backend (generated/numpy/, generated/cupy/).

Each architecture's file is rendered from the spec under that architecture with the seeds'
defaults for every other choice; BERT's under the choices of BertModel (the bert_base
variant's), Llama's under those of the llama3_8b variant. Byte-identical on every run,
headed by tspec's header (``spec.files.HEADERS``: what tspec may replace), then the spec's
name and content hash. Beside them, each backend's folder holds its
runtime, _runtime.py, the helpers every model there calls: each folder is a package of its own.

`tspec generate VARIANT_OR_SPEC` writes one model instead: a variant's (a built-in name or a
.toml), or a spec's under its default choices, as DIR/NAME.py for one backend, NAME the
variant's (its file's stem) or the spec's, with DIR/_runtime.py and DIR/__init__.py (written
only where none is) beside it: DIR is a package, ``from DIR import NAME``. DIR defaults to
generated/<backend>/ in the checkout for a built-in variant or spec, beside the built-in
models, and to the working directory for any other. The module is the one its
choices give, with the variant's dims and settings as the defaults of the keyword arguments
that take them (H, H_kv, eps, theta): called with none, it computes that variant.
``tspec.compile`` loads the same text with no file in the user's tree:
``execution.loading.load_variant``.
"""

import dataclasses
import keyword
import math
import os
import re
import shlex
from collections.abc import Mapping
from pathlib import Path

from tspec import shipped
from tspec.checking.report import require_proved
from tspec.codegen import ir
from tspec.codegen.backends import BACKENDS
from tspec.codegen.backends import backend as backend_named
from tspec.codegen.lowering.lower import lower
from tspec.codegen.lowering.spelling import Spelling
from tspec.codegen.rendering.render import render, render_runtime, runtime_named, runtime_version
from tspec.errors import UsageError, quoted
from tspec.files import HEADERS, headed, inside, stale_diff, write_outputs
from tspec.language.model import Spec
from tspec.language.names import module_name_like
from tspec.language.variant import Variant

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


def source(spec: Spec, choices: dict[str, str], backend: str = "numpy",
           defaults: Mapping[str, int | float] | None = None, origin: str = "") -> str:
    """The generated module's text for a spec under some choices; ``defaults``: values the
    keyword arguments of those names take when not given (a variant's dims and settings;
    ``with_defaults``); ``origin``: the variant it computes, as its docstring names it."""
    lowered = lower(spec, choices, backend_named(backend))
    if origin:
        lowered = dataclasses.replace(lowered, origin=origin)
    return render(with_defaults(lowered, defaults) if defaults else lowered)


def with_defaults(module: ir.Module, values: Mapping[str, int | float]) -> ir.Module:
    """The module with ``values`` as the defaults of its functions' keyword arguments of those
    names (as code spells them, ``codegen.lowering.spelling``): a dim (an int keyword, else required) a positive integer, a setting (a float
    keyword, else the catalogue's default) a finite number; each keyword's meaning says so.
    Only numbers reach the code, written by Python (``repr``), never text as given."""
    def keyword(record: ir.Parameter) -> ir.Parameter:
        value = values.get(record.name)
        if value is None and isinstance(record.default, ir.Number) and \
                record.annotation == ir.PlainType("float"):
            # a setting the variant leaves at tspec's default says so too, as its dims do
            return dataclasses.replace(record, meaning=f"{record.meaning}; default "
                                                       f"{record.default.spelling}, tspec's")
        if isinstance(value, bool) or value is None:
            return record
        if record.annotation == ir.PlainType("int") and isinstance(value, int) and value > 0:
            code = str(value)
        elif record.annotation == ir.PlainType("float") and isinstance(value, (int, float)) \
                and math.isfinite(value):
            code = repr(float(value))
        else:
            return record
        return dataclasses.replace(record, default=ir.Number(code),
                                   meaning=f"{record.meaning}; default {code}, the variant's")

    functions = [dataclasses.replace(f, keywords=tuple(keyword(k) for k in f.keywords))
                 for f in module.functions]
    return dataclasses.replace(module, functions=functions)


def files(backends: tuple[str, ...] = tuple(BACKENDS)) -> dict[str, str]:
    """Every generated file for some backends (default: all): relative path -> text."""
    spec = shipped.read_spec(shipped.BUILTIN_SPEC)
    out = {}
    for backend in backends:
        out[f"{backend}/__init__.py"] = headed("__init__.py", (
            f'"""Generated forward code for {backend}: one module per architecture of the '
            'built-in Transformer, BERT and Llama."""\n'))
        for name, choices in BUILTIN_MODELS.items():
            out[f"{backend}/{name}.py"] = source(spec, choices, backend)
        out[f"{backend}/_runtime.py"] = runtime_source(backend)
    return out


def runtime_source(backend: str = "numpy") -> str:
    """The text of a backend's runtime module, _runtime.py."""
    return render_runtime(backend_named(backend))


def default_dir() -> Path:
    return shipped.in_checkout("generated", "generated code", "--out DIR")


def write(out: Path, backends: tuple[str, ...] = tuple(BACKENDS), *,
          force: bool = False) -> list[Path]:
    """Write every generated file, or none (``spec.files.write_outputs``: a file there that
    tspec did not write is refused unless ``force``)."""
    texts = files(backends)                 # every file made before any is written
    write_outputs(texts, root=out, force=force)
    return [out / relative for relative in texts]


def stale(out: Path, backends: tuple[str, ...] = tuple(BACKENDS)) -> str:
    """A unified diff of every file that differs from what generation gives; '' when none."""
    return "".join(stale_diff(inside(out, relative), text)
                   for relative, text in files(backends).items())


# -- one model: `tspec generate VARIANT_OR_SPEC`, tspec.compile

_MODULE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
PACKAGE_DOC = (HEADERS[".py"] + '"""Generated forward code for {backend} (`tspec generate`): '
               'each model module here imports the runtime beside it, _runtime.py."""\n')


def module_name(variant: Variant) -> str:
    """The name of a variant's module: the variant's (its file's stem), or the spec's; refused
    (a UsageError saying how to name it) unless it is a Python module name of letters, digits
    and underscores that starts with a letter (an underscore starts the runtime's name)."""
    name = variant.name
    if _MODULE_NAME.match(name) and not keyword.iskeyword(name):
        return name
    why = "a Python keyword" if keyword.iskeyword(name) else "not a Python module name"
    suggestion = module_name_like(name)
    what = "spec" if variant.is_spec else "variant"
    how = "rename the spec" if variant.is_spec or not variant.file else \
        f"rename {quoted(variant.file)}"
    raise UsageError(f"{what} {quoted(name)} names its module, and {quoted(name)} is {why}: "
                     f"{how} to letters, digits and underscores that start with a letter "
                     f"(such as {suggestion})")


def variant_source(variant: Variant, backend: str = "numpy") -> str:
    """The module of one variant, or of a spec under its default choices (what
    ``tspec generate VARIANT_OR_SPEC`` writes): the code its choices give, its dims and
    settings the defaults of the keywords that take them. It is checked first as `tspec
    check` checks it (a variant under its choices and at its sizes; a spec under every
    combination of its choices, though the module is its default choices'): a finding is a
    FindingsError, nothing is generated."""
    chosen = backend_named(backend).name
    origin = "" if variant.is_spec else _shown_variant(variant)
    require_proved(variant, "no code generated")
    variant = dataclasses.replace(variant, is_spec=False)     # a spec: its default choices
    # keyed as the keywords are spelt: a dim named like a setting (eps) is spelt apart (eps_)
    spelt = Spelling.of(variant.spec)
    return source(variant.spec, variant.choices, chosen,
                  {spelt(name): value for name, value in variant.dims.items()} |
                  dict(variant.settings), origin=origin)


def _shown_variant(variant: Variant) -> str:
    """A variant as a module's docstring names it: a built-in one, or an imported config
    object, by its name; one from a file by the file's name (a config.json with its folder's),
    which no working directory changes."""
    builtin = shipped.builtin_variants()
    if variant.file is None or variant.name in builtin and \
            Path(variant.file) == builtin[variant.name]:
        return variant.name
    path = Path(variant.file)
    return f"{path.parent.name}/{path.name}" if path.name == "config.json" else path.name


def variant_dir(variant: Variant, backend: str, out: Path | None) -> Path:
    """Where one model's module goes: ``out``; else, for a built-in variant or spec,
    generated/<backend>/ in the checkout, and for any other (a user's) the working directory,
    so that no command writes a user's model into tspec's own tree unasked. Refused when it
    names something other than a folder."""
    if out is not None:
        folder = out
    elif shipped.is_builtin(variant):
        folder = default_dir() / backend_named(backend).name
    else:
        folder = Path.cwd()
    if os.path.lexists(folder) and not folder.is_dir():
        raise UsageError(f"--out {quoted(str(folder))} is not a folder: it names the folder "
                         "the module, its runtime and __init__.py go in")
    return folder


def variant_files(variant: Variant, backend: str, out: Path) -> dict[str, str]:
    """The files of one model in folder ``out`` (relative path -> text): its module, the
    backend's runtime, and an __init__.py where the folder has none (one there is kept: the
    models of a folder share it). A module of a built-in model's name in the built-in folder
    is refused: that file is what plain `tspec generate` writes."""
    name = module_name(variant)
    chosen = backend_named(backend).name
    root = shipped.checkout()
    if name in BUILTIN_MODELS and root is not None and \
            _same_folder(out, root / "generated" / chosen):
        raise UsageError(f"{name} is the name of a built-in model of {out}, which `tspec "
                         f"generate` writes there: give --out another folder, or name the "
                         f"variant otherwise")
    texts = {f"{name}.py": variant_source(variant, chosen),
             "_runtime.py": runtime_source(chosen)}
    if not os.path.lexists(out / "__init__.py"):
        texts = {"__init__.py": PACKAGE_DOC.format(backend=chosen), **texts}
    return texts


def _same_folder(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except (OSError, RuntimeError):
        return False


def notes(variant: Variant, backend: str = "numpy") -> list[str]:
    """What the generated code of a variant computes otherwise than the spec's form asks, in
    words (``function: why``): an attention core whose scores pass through a chain the
    backend's strategy cannot apply is computed as written, its whole score matrix at once.
    `tspec generate` prints them."""
    lowered = lower(variant.spec, variant.spec.choice_values(variant.choices),
                    backend_named(backend))
    return [f"{function.name}: {step.unblocked}" for function in lowered.functions
            for step in ir.walk(function) if isinstance(step, ir.AttentionCore) and
            step.unblocked]


def write_variant(variant: Variant, backend: str, out: Path, *,
                  force: bool = False) -> list[Path]:
    """Write one model's files into ``out`` (``variant_files``), all or none; a file there
    that tspec did not write is refused unless ``force`` (``spec.files.write_outputs``). A
    folder whose runtime is another backend's is refused: its models would lose theirs."""
    texts = variant_files(variant, backend, out)
    chosen = backend_named(backend).name
    other = _runtime_backend(out / "_runtime.py")
    if other is not None and other != chosen:
        raise UsageError(f"{out} holds the {other} runtime, which its models import: a folder's "
                         f"models share one backend; give --out another folder for {chosen}")
    write_outputs(texts, root=out, force=force)
    return [out / relative for relative in texts]


def _runtime_backend(path: Path) -> str | None:
    """The backend of the runtime at ``path`` where this tspec renders it; else None."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    found = runtime_named(runtime_version(text))
    return found[0] if found is not None else None


def stale_variant(variant: Variant, backend: str, out: Path) -> str:
    """A unified diff of every file of one model in ``out`` that differs from what
    generation gives (a missing __init__.py too); '' when none."""
    return "".join(stale_diff(inside(out, relative), text)
                   for relative, text in variant_files(variant, backend, out).items())


def command(target: str, backend: str, out: Path | None) -> str:
    """The command that writes one model's files again, as a shell takes it."""
    words = ["tspec", "generate", str(target)]
    if backend != "numpy":
        words += ["--backend", backend]
    if out is not None:
        words += ["--out", str(out)]
    return " ".join(shlex.quote(word) for word in words)
