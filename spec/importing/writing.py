"""An imported config as variant TOML: a comment naming the source, the description, and
the [dims], [choices] and [settings] tables (every value a number or an option name the
importer chose, never text copied from the config); and the TOML written to a file
(`tspec import --out`), as every file tspec writes is (``spec.files.write_outputs``)."""

from pathlib import Path

from tspec.errors import UsageError, quoted
from tspec.files import write_outputs
from tspec.importing.families import Imported

# how an imported variant begins, whatever the config: what tells tspec the file is its own
# (spec.files.SIGNATURES holds it)
FIRST_LINE = "# Imported by `tspec import` from "

# the order dims are written in (the spec's own order of declaration)
DIM_ORDER = ("d_model", "H", "H_kv", "d_k", "d_v", "d_ff", "N", "V", "max_len", "V_type", "W")


def counted(n: int, noun: str) -> str:
    """1 layer, 2 layers."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def heads(dims: dict) -> str:
    """The heads as the description says them: 32 heads sharing 8 key-value heads; 8 heads
    sharing one key-value head (multi-query)."""
    text = counted(dims["H"], "head")
    if "H_kv" in dims:
        text += " sharing one key-value head (multi-query)" if dims["H_kv"] == 1 else \
            f" sharing {dims['H_kv']} key-value heads"
    return text


def variant_text(imported: Imported, source: str) -> str:
    dims = imported.dims
    parts = [f"d_model {dims['d_model']}", heads(dims)]
    parts += [f"d_ff {dims['d_ff']}", counted(dims["N"], "layer"), f"vocabulary {dims['V']}"]
    if "W" in dims:
        parts.append(f"sliding window {dims['W']}")
    description = f"{imported.model}: " + ", ".join(parts)
    lines = [f"{FIRST_LINE}{source}",
             f"# (model_type {imported.family!r}, Hugging Face {imported.model}).",
             *(f"# {note}" for note in imported.notes),
             'spec = "transformer"',
             f'description = "{description}"',
             "",
             "[dims]"]
    lines += [f"{name} = {dims[name]}" for name in DIM_ORDER if name in dims]
    lines += ["", "[choices]"]
    lines += [f'{name} = "{option}"' for name, option in imported.choices.items()]
    lines += ["", "[settings]"]
    lines += [f"{name} = {value!r}" for name, value in imported.settings.items()]
    return "\n".join(lines) + "\n"


def write(out: str | Path, text: str, *, force: bool = False) -> Path:
    """Write an imported variant's TOML to ``out`` as every file tspec writes is: whole or not
    at all (a failed write leaves the old file as it was), never into a named pipe or a device
    (refused, nothing waits), never through a symbolic link, and over a file only where tspec
    wrote it (an imported variant) unless ``force``."""
    path = Path(out)
    if path.is_dir():
        raise UsageError(f"--out {quoted(str(path))} is a folder; name the variant file")
    write_outputs({path: text}, force=force)
    return path
