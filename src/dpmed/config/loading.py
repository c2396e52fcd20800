"""Read a study file into a :class:`~dpmed.config.schema.Study`, or fail naming the file and the key.

Precedence is command line over file over defaults: ``overrides`` (``{"training.epochs": 2}``) are applied to the
parsed YAML before validation, so they are checked exactly like keys written in the file.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any, Mapping

import yaml
from pydantic import BaseModel, ValidationError

from dpmed.config import schema
from dpmed.errors import ConfigError
from dpmed.mechanisms import MECHANISMS

__all__ = ["load_study", "parse_override", "study_to_dict"]


class _Loader(yaml.SafeLoader):
    """YAML 1.1 reads ``1e-5`` as a string (it wants ``1.0e-5``); privacy parameters are written that way, so
    accept exponent floats too."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$"),
    list("-+0123456789."),
)


def _field_names() -> set[str]:
    """Every key a study file may hold, for "did you mean" hints: the schema's and every registered arm's."""
    models = [obj for obj in vars(schema).values() if isinstance(obj, type) and issubclass(obj, BaseModel)]
    names: set[str] = set()
    for model in models + [info.arm for info in MECHANISMS.values()]:
        names.update(model.model_fields)
    return names


def _describe(error: Mapping[str, Any]) -> str:
    # pydantic puts the discriminator's value (the mechanism) into an arm's location: a user wrote arms[0].scale
    loc = [str(p) for p in error["loc"] if p not in MECHANISMS]
    where = ""
    for part in loc:
        where += f"[{part}]" if part.isdigit() else (f".{part}" if where else part)
    kind, msg = error["type"], error["msg"]
    if kind == "extra_forbidden":
        key = loc[-1]
        close = difflib.get_close_matches(key, sorted(_field_names()), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"{where}: unknown key{hint}; remove or rename it"
    if kind == "missing":
        return f"{where}: required key is missing"
    got = error.get("input")
    shown = "" if isinstance(got, (dict, list)) or "got" in msg else f" (got {got!r})"
    return f"{where or '(top level)'}: {msg.removeprefix('Value error, ')}{shown}"


def parse_override(text: str) -> tuple[str, Any]:
    """``"training.epochs=2"`` -> ``("training.epochs", 2)``; the value is read as YAML."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE, e.g. --set training.epochs=2")
    return key.strip(), yaml.load(value, Loader=_Loader)


def _apply(raw: dict, key: str, value: Any) -> None:
    node: Any = raw
    parts = key.split(".")
    for part in parts[:-1]:
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise ConfigError(f"override {key!r}: {part!r} is not an index of that list")
            node = node[int(part)]
        else:
            node = node.setdefault(part, {})
            if not isinstance(node, (dict, list)):
                raise ConfigError(f"override {key!r}: {part!r} holds a value, not a section")
    last = parts[-1]
    if isinstance(node, list):
        if not last.isdigit() or int(last) >= len(node):
            raise ConfigError(f"override {key!r}: {last!r} is not an index of that list")
        node[int(last)] = value
    else:
        node[last] = value


def load_study(path: str | Path, overrides: Mapping[str, Any] | None = None) -> schema.Study:
    """Parse and validate a study file; relative data paths are resolved against the file's folder.

    Raises ConfigError naming the file and every offending key, before anything is trained.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"study file {path} does not exist; pass the path of a .yaml study (see configs/)")
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"study file {path} is not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"study file {path}: expected a mapping of keys (name, data, arms, ...) at the top")
    for key, value in (overrides or {}).items():
        _apply(raw, key, value)
    try:
        study = schema.Study.model_validate(raw)
    except ValidationError as exc:
        lines = [f"  - {_describe(e)}" for e in exc.errors()]
        raise ConfigError(f"study file {path} has {len(lines)} problem(s):\n" + "\n".join(lines)) from None
    data_path = study.data.path
    if data_path is not None and not data_path.is_absolute():
        data_path = (path.parent / data_path).resolve()
        study = study.model_copy(update={"data": study.data.model_copy(update={"path": data_path})})
    if data_path is not None and not data_path.exists():
        raise ConfigError(
            f"study file {path}: data.path {data_path} does not exist; fix the path in the file or pass "
            "--data-path FILE"
        )
    return study


def study_to_dict(study: schema.Study) -> dict:
    """The study as plain YAML-able data (paths as strings)."""
    return study.model_dump(mode="json")
