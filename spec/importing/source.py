"""Reading a Hugging Face config: a ``config.json`` file, a folder holding one, a dict, or a
``transformers`` ``PretrainedConfig`` (anything with ``to_dict``), as a plain dict and a
name for the comment and errors."""

import json
from pathlib import Path

from tspec.errors import ConfigError, UsageError, quoted
from tspec.files import read_limited
from tspec.inputs import LongInteger, json_loads, plain, user_path

MAX_CONFIG_BYTES = 1_000_000


def read_config(config) -> tuple[dict, str]:
    """The config as a dict, and what to call it (its path, or its class). A dict's (and a
    PretrainedConfig's) values are read as its JSON would give them: NumPy scalars as Python
    numbers, tuples as lists."""
    if isinstance(config, dict):
        return plain(config), "a config dict"
    if hasattr(config, "to_dict") and callable(config.to_dict):
        data = config.to_dict()
        if not isinstance(data, dict):
            raise ConfigError(f"{type(config).__name__}.to_dict() did not give a dict")
        return plain(data), f"a transformers {type(config).__name__}"
    if isinstance(config, (str, Path)):
        return _read_file(user_path(config, "a config path"))
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
        data = json_loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError as error:
        raise ConfigError(f"not UTF-8 text ({error.reason} at byte {error.start})",
                          file=name) from None
    except json.JSONDecodeError as error:
        raise ConfigError(f"malformed JSON: {error.msg}", file=name, line=error.lineno,
                          column=error.colno) from None
    except LongInteger as error:
        raise ConfigError(error.message, file=name, line=error.line,
                          column=error.column) from None
    except RecursionError:
        raise ConfigError("malformed JSON: nested too deeply", file=name) from None
    except ValueError as error:         # anything else json refuses: in its words
        raise ConfigError(f"malformed JSON: {' '.join(str(error).split())}",
                          file=name) from None
    if not isinstance(data, dict):
        raise ConfigError(f"a config is a JSON object, got {type(data).__name__}", file=name)
    return data, name


def field_lines(config) -> dict[str, int]:
    """The line of config.json where each field of its top level is set (a config file's:
    read again; a dict's: none), for errors and findings placed at the field that gave a
    value. A scan of the text that follows strings and nesting: no second parse."""
    if not isinstance(config, (str, Path)):
        return {}
    path = user_path(config, "a config path")
    if path.is_dir():
        path = path / "config.json"
    try:
        text = read_limited(path, MAX_CONFIG_BYTES, "config", ConfigError).decode("utf-8-sig")
    except (OSError, ConfigError, UnicodeDecodeError):
        return {}
    lines: dict[str, int] = {}
    depth, line, index = 0, 1, 0
    expecting, pending = False, None        # a key may come next at the top level; one read
    while index < len(text):
        char = text[index]
        if char == '"':
            end = index + 1
            while end < len(text) and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            if depth == 1 and expecting:
                pending, expecting = (text[index:end + 1], line), False
            line += text.count("\n", index, end)     # (JSON strings hold none)
            index = end + 1
            continue
        if char == "\n":
            line += 1
        elif char in "{[":
            depth += 1
            expecting = depth == 1 and char == "{"
        elif char in "}]":
            depth -= 1
        elif char == "," and depth == 1:
            expecting = True
        elif char == ":" and depth == 1 and pending is not None:
            try:
                lines.setdefault(json.loads(pending[0]), pending[1])
            except ValueError:
                pass
            pending = None
        index += 1
    return lines
