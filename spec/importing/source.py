"""Reading a Hugging Face config: a ``config.json`` file, a folder holding one, a dict, or a
``transformers`` ``PretrainedConfig`` (anything with ``to_dict``), as a plain dict and a
name for the comment and errors."""

import json
from pathlib import Path

from tspec.errors import ConfigError, UsageError, quoted
from tspec.files import read_limited

MAX_CONFIG_BYTES = 1_000_000


def read_config(config) -> tuple[dict, str]:
    """The config as a dict, and what to call it (its path, or its class)."""
    if isinstance(config, dict):
        return dict(config), "a config dict"
    if hasattr(config, "to_dict") and callable(config.to_dict):
        data = config.to_dict()
        if not isinstance(data, dict):
            raise ConfigError(f"{type(config).__name__}.to_dict() did not give a dict")
        return data, f"a transformers {type(config).__name__}"
    if isinstance(config, (str, Path)):
        return _read_file(Path(config))
    raise UsageError(f"a config is a path, a dict or a transformers PretrainedConfig, got "
                     f"{type(config).__name__}")


def _read_file(path: Path) -> tuple[dict, str]:
    if path.is_dir():
        path = path / "config.json"
        if not path.is_file():
            raise UsageError(f"{quoted(str(path.parent))}: the folder holds no config.json")
    name = quoted(str(path))
    try:
        raw = read_limited(path, MAX_CONFIG_BYTES, "config", ConfigError)
    except OSError as error:
        raise UsageError(f"cannot read {name}: {error.strerror}") from None
    try:
        data = json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError as error:
        raise ConfigError(f"not UTF-8 text ({error.reason} at byte {error.start})",
                          file=name) from None
    except json.JSONDecodeError as error:
        raise ConfigError(f"malformed JSON: {error.msg}", file=name, line=error.lineno,
                          column=error.colno) from None
    except RecursionError:
        raise ConfigError("malformed JSON: nested too deeply", file=name) from None
    if not isinstance(data, dict):
        raise ConfigError(f"a config is a JSON object, got {type(data).__name__}", file=name)
    return data, name
