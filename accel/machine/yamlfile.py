"""YAML files of the contract (configs, energy tables, sweep specs): read and parsed with a
one-line error that names the file, and the line and column of a syntax error.

Each caller passes its own exception class, so that a bad config is a ``ConfigError``, a bad
energy table an ``EnergyError``, and so on; the messages have one form everywhere::

    my.yaml: no such config file
    my.yaml: cannot read config file: [Errno 13] Permission denied: 'my.yaml'
    my.yaml:3:7: malformed YAML: mapping values are not allowed here
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

__all__ = ["parse_yaml", "read_text", "read_yaml", "require_mapping"]


def parse_yaml(text: str, source: str, error: type[Exception] = ValueError) -> Any:
    """``text`` parsed as YAML; a syntax error is one ``error`` naming ``source``, line and
    column."""
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = (exc.problem or str(exc)).strip().replace("\n", " ")
        raise error(f"{where}: malformed YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise error(f"{source}: malformed YAML: {str(exc).splitlines()[0]}") from None


def read_text(path: Path, what: str, error: type[Exception], missing: str | None = None) -> str:
    """The text of the file ``path``, a ``what`` (``"config file"``, ...): a missing file is
    ``error("PATH: no such WHAT")`` (or ``PATH: MISSING`` when ``missing`` is given), an
    unreadable one ``PATH: cannot read WHAT: ...``."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{path}: {missing or f'no such {what}'}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{path}: cannot read {what}: {exc}") from None


def read_yaml(path: Path, what: str, error: type[Exception], missing: str | None = None) -> Any:
    """The YAML content of the file ``path``: :func:`read_text`'s errors, and a syntax error as
    :func:`parse_yaml`'s."""
    return parse_yaml(read_text(path, what, error, missing), str(path), error)


def require_mapping(value: Any, source: str, key: str, keys: tuple[str, ...],
                    error: type[Exception], optional: tuple[str, ...] = ()) -> dict[str, Any]:
    """``value`` as a mapping with every key of ``keys`` and maybe some of ``optional``, or one
    ``error`` line: ``SOURCE: KEY: expected a mapping with keys ...``, ``SOURCE: KEY.K:
    unknown key; expected one of ...`` or ``SOURCE: KEY.K: missing``."""
    if not isinstance(value, dict):
        raise error(f"{source}: {key}: expected a mapping with keys {', '.join(keys)}, got "
                    f"{type(value).__name__} {value!r}")
    for k in value:
        if k not in keys + optional:
            raise error(f"{source}: {key}.{k}: unknown key; expected one of "
                        f"{', '.join(keys + optional)}")
    for k in keys:
        if k not in value:
            raise error(f"{source}: {key}.{k}: missing")
    return value
