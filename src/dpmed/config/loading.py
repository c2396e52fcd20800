"""Read a study file into a :class:`~dpmed.config.schema.Study`, or fail naming the file and the key.

Precedence is command line over file over defaults: ``overrides`` (``{"training.epochs": 2}``) are applied to the
parsed YAML before validation, so they are checked exactly like keys written in the file; a problem they cause is
blamed on them (``origins`` says how the user gave each, e.g. ``--set training.epochs=abc``), not on the file.
What the schema refuses is worded by `dpmed.config.problems`.
"""

from __future__ import annotations

import copy
import logging
import math
import re
from importlib import resources
from pathlib import Path
from typing import Any, Hashable, Mapping

import yaml
from pydantic import ValidationError

from dpmed.config import schema
from dpmed.config.plans import check_run_ids
from dpmed.config.problems import describe_problems
from dpmed.data import DATASET_SOURCES
from dpmed.errors import ConfigError

_log = logging.getLogger(__name__)

# The study `dpmed run` runs without one: the phantom quickstart, installed with the package.
QUICKSTART = Path(str(resources.files("dpmed") / "configs" / "quickstart.yaml"))

__all__ = ["load_study", "parse_override"]


class _OutOfRange(yaml.constructor.ConstructorError):
    """A number YAML reads but a double cannot hold: valid YAML, so quoting it is no remedy."""


class _Loader(yaml.SafeLoader):
    """YAML 1.1 reads ``1e-5`` as a string (it wants ``1.0e-5``); privacy parameters are written that way, so
    accept exponent floats too. A key given twice in one mapping is an error (plain YAML keeps the last silently,
    so a second ``training:`` block would drop the first's settings without a word); a key that overrides one
    merged in with ``<<: *anchor`` is not (that is what merge keys are for)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":     # SafeLoader's flatten_mapping merges it, own keys last
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if not isinstance(key, Hashable):    # SafeLoader's own error names it below
                continue
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice in one section (lines {seen[key]} and {line}); keep one",
                    key_node.start_mark)
            seen[key] = line
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        """A number past what a double holds is refused as written: 1e-400 would otherwise read as 0 and be refused
        as "got 0.0", or 1e400 as inf ("got inf"), values the user never wrote."""
        value = super().construct_yaml_float(node)
        mantissa = node.value.lower().partition("e")[0]
        if value == 0 and any(digit in "123456789" for digit in mantissa):
            problem = "underflows to 0 (the smallest positive double is about 5e-324)"
        elif math.isinf(value) and "inf" not in mantissa:
            problem = "overflows to infinity (the largest double is about 1.8e308)"
        else:
            return value
        raise _OutOfRange(None, None, f"the number {node.value} {problem}; write a number within a double's range",
                          node.start_mark)


_Loader.add_constructor("tag:yaml.org,2002:float", _Loader.construct_yaml_float)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$"),
    list("-+0123456789."),
)
# YAML 1.1 also reads 010 as octal 8, 0x10 as 16 and 1:30 as sexagesimal 90: a seed or an epoch count written so
# would silently be another number. Integers are decimal here; anything else stays a string for the schema to refuse.
# Floats likewise lose base 60 (1:30.0 as 90.0).
_FLOAT = re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?
                    |\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
                    |[-+]?\.(?:inf|Inf|INF)
                    |\.(?:nan|NaN|NAN))$""", re.X)
for _first, _resolvers in _Loader.yaml_implicit_resolvers.items():
    _resolvers[:] = [(tag, _FLOAT if tag == "tag:yaml.org,2002:float" and "inf" in regexp.pattern else regexp)
                     for tag, regexp in _resolvers if tag != "tag:yaml.org,2002:int"]
_Loader.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(r"^[-+]?(0|[1-9][0-9_]*)$"), list("-+0123456789"))
# No key of a study is a date: 2020-02-30 stays text (a study's name), not a date that does not exist.
for _resolvers in _Loader.yaml_implicit_resolvers.values():
    _resolvers[:] = [(tag, regexp) for tag, regexp in _resolvers if tag != "tag:yaml.org,2002:timestamp"]

# What PyYAML raises, beyond YAMLError, for a value its explicit tag cannot convert (!!int abc, !!bool maybe,
# !!timestamp x) or for nesting deeper than Python's recursion limit.
_UNREADABLE = (yaml.YAMLError, ValueError, TypeError, KeyError, AttributeError, RecursionError)


def _read_yaml(path: Path) -> Any:
    """The YAML document in ``path``, its marks naming the file (``yaml.load`` of a string names "<unicode
    string>"). A character YAML does not allow (a NUL, another control character: a file that is not text) is
    placed by line and column, not by its position in a string."""
    text = path.read_text(encoding="utf-8")
    try:
        loader = _Loader(text)
    except yaml.reader.ReaderError as exc:
        before = text[:exc.position]
        mark = yaml.Mark(str(path), exc.position, before.count("\n"), exc.position - before.rfind("\n") - 1, None,
                         None)
        raise yaml.MarkedYAMLError(problem=f"character #x{exc.character:04x} is not allowed in YAML text (a control "
                                           "character, or the file is not text at all); remove it, or pass the "
                                           "study's .yaml file", problem_mark=mark) from None
    loader.name = str(path)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expanded_size(node)
        return _unshared(loader.construct_document(node))
    finally:
        loader.dispose()


def _unshared(value: Any) -> Any:
    """``value`` with a section or list of its own wherever it holds one. PyYAML builds an anchor's value once and
    gives every alias of it (``training: *t``, and what ``<<: *a`` merges in) that same object, so an override of a
    key inside one place (--set pretrain.training.steps=50) wrote it into every place the alias stands: the arms'
    training too, without a word. Scalars are immutable and kept."""
    if isinstance(value, dict):
        return {key: _unshared(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_unshared(item) for item in value]
    return value


# The most values a study file may hold once its aliases are expanded. A study is at most a few thousand values;
# anchors nested nine deep ("billion laughs") expand a 1 kB file to 10^9 values, which the schema would walk for
# minutes while memory fills.
_MAX_VALUES = 100_000


def _check_expanded_size(root: yaml.Node) -> None:
    """Raise a marked YAMLError if ``root``, every alias expanded, holds more than `_MAX_VALUES` values or an alias
    inside its own anchor (a value that contains itself). Each node's size is counted once, so this takes time in
    the file's size, not the expanded size."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: yaml.Node) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        if id(node) in open_nodes:
            raise yaml.MarkedYAMLError(problem="an alias refers to the anchor it stands inside (a value that "
                                               "contains itself); write the value out instead",
                                       problem_mark=node.start_mark)
        open_nodes.add(id(node))
        children = (node.value if isinstance(node, yaml.SequenceNode) else
                    [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else [])
        total = 1 + sum(size(child) for child in children)
        open_nodes.discard(id(node))
        if total > _MAX_VALUES:
            raise yaml.MarkedYAMLError(problem=f"its aliases expand to more than {_MAX_VALUES:,} values (anchors "
                                               "that repeat anchors); write the values a study needs without "
                                               "nesting aliases", problem_mark=node.start_mark)
        sizes[id(node)] = total
        return total

    size(root)


def _unreadable(exc: BaseException) -> str:
    """One of `_UNREADABLE` that is no YAMLError, in words: PyYAML gives it no line."""
    if isinstance(exc, RecursionError):
        return "its lists or sections are nested too deep"
    return f"a value its tag cannot convert ({type(exc).__name__}: {exc}); remove the !!tag or fix the value"


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's error on one line: where, what, and in what construct (its own text spans five lines, with a
    snippet)."""
    def at(mark: Any) -> str:
        return f"line {mark.line + 1}, column {mark.column + 1}"

    if not isinstance(exc, yaml.MarkedYAMLError) or exc.problem_mark is None or not exc.problem:
        return " ".join(str(exc).split())
    text = f"{at(exc.problem_mark)}: {exc.problem}"
    if exc.context:
        text += f" ({exc.context}" + (f" at {at(exc.context_mark)}" if exc.context_mark is not None else "") + ")"
    if "'\\t'" in exc.problem:      # PyYAML's "found character '\t' that cannot start any token"
        return text + "; YAML indents with spaces only: replace the tab with spaces"
    if "another document" in exc.problem:
        return text + ("; a study file holds one study: remove the '---' line and what follows it, or put that study "
                       "in a file of its own")
    return text + next((f"; {hint}" for words, hint in _YAML_HINTS if words in text), "")


# What to do about PyYAML's other common problems, by words of its message (its own text says only what it found)
_YAML_HINTS = [
    ("mapping values are not allowed", "a value holding ': ' must be quoted (name: 'a: b'), and a key must line up "
                                       "with the other keys of its section"),
    ("scanning a quoted scalar", "close the quote that the value opens, on the same line"),
    ("could not find expected ':'", "write each setting as key: value, with a space after the colon"),
    ("parsing a flow", "close the [ or { it names with its ] or }, and separate its items with commas"),
    ("expected <block end>", "line the key up with the other keys of its section (a list item, '- ...', goes under "
                             "its key, indented)"),
    ("undefined alias", "define the anchor (&name) before a *name uses it, or quote a value that starts with *"),
    ("could not determine a constructor", "remove the tag (the word after ! or !!): a study file holds plain values"),
    ("cannot start any token", "quote the value (YAML reserves its first character)"),
    ("unhashable key", "a key is a word: write it as text, not a list or a section"),
]


def parse_override(text: str) -> tuple[str, Any]:
    """``"training.epochs=2"`` -> ``("training.epochs", 2)``; the value is read as YAML."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE, e.g. --set training.epochs=2")
    if re.search(r"\[\s*\d+\s*\]", key):
        dotted = re.sub(r"\[\s*(\d+)\s*\]", r".\1", key.strip())
        raise ConfigError(f"--set {text!r}: a list item is named by its index after a dot: write {dotted}=...")
    if any(not part.strip() for part in key.strip().split(".")):
        raise ConfigError(f"--set {text!r}: the key {key.strip()!r} has an empty part between dots; write it as "
                          "section.key, e.g. --set training.epochs=2")
    try:
        return key.strip(), yaml.load(value, Loader=_Loader)
    except _OutOfRange as exc:
        raise ConfigError(f"--set {text!r}: {exc.problem}") from None
    except _UNREADABLE as exc:
        problem = (_value_problem(exc) if isinstance(exc, yaml.MarkedYAMLError) else
                   str(exc).splitlines()[0] if isinstance(exc, yaml.YAMLError) else _unreadable(exc))
        raise ConfigError(f"--set {text!r}: the value is not valid YAML ({problem}); quote it, e.g. "
                          f"--set '{key.strip()}=\"...\"'") from None


def _value_problem(exc: yaml.MarkedYAMLError) -> str:
    """What PyYAML found in a --set value, and in what construct: the first line of its text is the construct alone
    where it has one ("while parsing a flow sequence"), which did not say what was wrong. No line or column: the
    value is one line the user typed."""
    if not exc.problem:
        return str(exc).splitlines()[0]
    return exc.problem + (f" ({exc.context})" if exc.context else "")


def _list_index(items: list, part: str, origin: str) -> int:
    """The item of a study file's list that ``part`` of a --set key names: its index, or the ``name`` of one item (an
    arm: ``arms.dp-sgd.target_epsilon``); else a ConfigError listing the items by index and name."""
    if part.isdigit() and int(part) < len(items):
        return int(part)
    named = [i for i, item in enumerate(items) if isinstance(item, dict) and str(item.get("name")) == part]
    if len(named) == 1 and not part.isdigit():
        return named[0]
    entries = ", ".join(f"{i} ({item['name']})" if isinstance(item, dict) and "name" in item else str(i)
                        for i, item in enumerate(items))
    raise ConfigError(f"{origin}: {part!r} names no item of that list; its {len(items)} entries, by index (and "
                      f"name): {entries or 'none'}")


def _apply(raw: dict, key: str, value: Any, origin: str) -> tuple[list[list[str]], str]:
    """Set ``key`` in ``raw`` to ``value``; (the sections, as key paths, it had to add, absent or null before; the key
    with any list item it names by ``name`` given as its index)."""
    node: Any = raw
    parts = key.split(".")
    created = []
    for depth, part in enumerate(parts[:-1]):
        if isinstance(node, list):
            parts[depth] = str(_list_index(node, part, origin))
            node = node[int(parts[depth])]
        else:
            if node.get(part) is None:       # absent, or null in the file (a section left at its defaults)
                node[part] = {}
                created.append(parts[:depth + 1])
            node = node[part]
        if not isinstance(node, (dict, list)):   # a list's item too: seeds.0.x names a key inside the seed 0
            raise ConfigError(f"{origin}: {'.'.join(parts[:depth + 1])!r} holds a value, not a section")
    last = parts[-1]
    if isinstance(node, list):
        parts[-1] = str(_list_index(node, last, origin))
        node[int(parts[-1])] = value
    else:
        node[last] = value       # an unknown key it sets is the option's by its own path (`describe_problems`)
    return created, ".".join(parts)


def check_study(study: schema.Study) -> schema.Study:
    """``study`` validated again: a Study edited with pydantic's ``model_copy(update=...)`` skips validation, and
    an invalid one would fail late, deep in planning, in pydantic's words. Raises ConfigError as load_study does.
    Only the keys given are validated again, so that the Study keeps which they are (``model_fields_set``): a full
    dump gave every default, and `dpmed run` then warned of defaults no study file held as settings the data turn
    off (`Study.settings_the_data_turn_off`). A Study built in Python is told each setting another turns off
    (`Study.settings_turned_off`), as `load_study` tells a study file's: nothing else read it, and one was ignored
    without a word; so is a loaded Study's setting changed in Python since (`Study.given_in_python`), or one that a
    change in Python turned off (lr_scaling set to none under the file's reference_batch_size), and only those:
    load_study told the others."""
    raw = study.model_dump(warnings=False, exclude_unset=True)
    try:
        checked = schema.Study.model_validate(raw)
    except ValidationError as exc:
        lines, _ = describe_problems(exc, raw, {}, {})
        raise ConfigError(f"the Study passed to run_study has {len(lines)} problem(s):\n"
                          + "\n".join(f"  - {line}" for line in lines)) from None
    try:
        check_run_ids(checked)
    except ValueError as exc:
        raise ConfigError(f"the Study passed to run_study: {exc}") from None
    # where its keys were given, which no dump holds
    checked = checked.given_with(study._origins, read=study._read)
    # what load_study told: the settings turned off as it read them (a study it read validates again as read)
    told = set() if study._read is None else {key for key, _ in schema.Study.model_validate(study._read)
                                               .settings_turned_off()}
    for key, why in checked.settings_turned_off():
        if key not in told or checked.given_in_python(key):
            _log.warning("%s changes nothing, as %s; %s", key, why, checked.removal(key))
    return checked


def load_study(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None, *,
               origins: Mapping[str, str] | None = None) -> schema.Study:
    """Parse and validate a study file (default: the embedded phantom quickstart, as `dpmed run` with no study);
    a relative path is read from the file's folder, or from the current folder where an override gives it.

    ``overrides``: dotted keys to values, as ``dpmed run --set`` gives them (``{"training.epochs": 2}``; a list
    item by index or name: ``{"arms.dp-sgd.target_epsilon": 4}``), applied to the file before it is checked.

    Raises ConfigError naming the file and every offending key, before anything is trained; a problem caused by an
    override is blamed on it, in the words of ``origins`` (override key -> how the user gave it, e.g.
    ``{"training.epochs": "--set training.epochs=abc"}``; default: ``override training.epochs='abc'``).
    """
    if overrides is not None and not isinstance(overrides, Mapping):     # a Python caller's slip
        raise ConfigError(f"overrides map dotted keys to values, e.g. {{'training.epochs': 2}}, not "
                          f"{type(overrides).__name__} {overrides!r:.60}")
    overrides = dict(overrides or {})
    origins = {key: (origins or {}).get(key) or f"override {key}={value!r}" for key, value in overrides.items()}
    if path is not None and not isinstance(path, (str, Path)):     # a Python caller's slip, said as a user's error
        raise ConfigError(f"a study is a study file's path (str or Path) or a loaded Study, not {type(path).__name__} "
                          f"{path!r:.60}")
    path = QUICKSTART if path is None else Path(path)
    if path.is_dir():
        raise ConfigError(f"study file {path} is a folder; pass the path of a .yaml study in it (see configs/)")
    if path.is_symlink() and not path.exists():     # its target is gone, or links loop
        raise ConfigError(f"study file {path} is a link to {path.readlink()}, which leads to no file (it is missing, "
                          "or links loop); point the link at the study file, or pass the study file itself")
    if path.exists() and not path.is_file():
        raise ConfigError(f"study file {path} is not a regular file (a device, a pipe or a socket); pass the path of "
                          "a .yaml study (see configs/)")
    if not path.is_file():
        raise ConfigError(f"study file {path} does not exist; pass the path of a .yaml study (see configs/)")
    try:
        raw = _read_yaml(path)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"study file {path} is not UTF-8 text (byte {exc.start}: {exc.reason}); save it as UTF-8 "
                          "(most editors: 'Save with encoding')") from None
    except OSError as exc:      # not readable by this user, a read error of the disk or the network share
        raise ConfigError(f"study file {path} cannot be read ({exc.strerror or exc}); make it readable to you "
                          "(chmod u+r), or pass a copy you can read") from None
    except _OutOfRange as exc:
        raise ConfigError(f"study file {path}, {_yaml_problem(exc)}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"study file {path} is not valid YAML: {_yaml_problem(exc)}") from None
    except _UNREADABLE as exc:
        raise ConfigError(f"study file {path} is not valid YAML: {_unreadable(exc)}") from None
    if raw is None:     # nothing, or comments only
        raise ConfigError(f"study file {path} is empty; write a study in it (name, data, arms: see "
                          "configs/quickstart.yaml)")
    if not isinstance(raw, dict):
        got, how = ("a list", ", not as a list item") if isinstance(raw, list) else (f"{raw!r:.60}", "")
        raise ConfigError(f"study file {path}: expected a mapping of keys (name, data, arms, ...) at the top, got "
                          f"{got}; write each key at the start of a line (name: ..., arms: ...){how}")
    if {"study", "dataset", "runs"} <= raw.keys() and "arms" not in raw:
        raise ConfigError(f"{path} is the record a study folder keeps of its study (study.yaml, written by dpmed "
                          "run), not a study file; its 'study:' section is the study as run: copy that section's "
                          "keys to the top of a new file to run it again, or pass the study folder to dpmed report "
                          "or dpmed status")
    in_file = copy.deepcopy(raw)      # the file's own keys, which an override of a whole section may drop
    # each value copied: a later override of a key inside it (training.batch_size after training={...}) would else
    # write into the caller's own mapping
    applied = {key: _apply(raw, key, copy.deepcopy(value), origins[key]) for key, value in overrides.items()}
    given = origins      # by each override's key: two may set one list item, by its name and by its index
    # keyed by the path as set, list items by index: a problem's location names an arm by its index. Two overrides
    # of one arm's key, by its index and by its name, are one key, given by the later and placed where it applied
    # (`schema.given_by` takes the last that holds a key), with the sections either added. A section an override
    # added and a later one replaced (arms.2.audit.kind=noise, then arms.2={..., audit: {...}}) is the later's: what
    # it lacks is blamed on that one, not said to be added by the first
    created: dict[str, list[list[str]]] = {}
    origins = {}
    later = list(applied.values())
    for i, (key, (made, at)) in enumerate(applied.items()):
        made = [section for section in made if not any(schema.holds(by, section) for _, by in later[i + 1:])]
        created[at] = created.pop(at, []) + made
        origins.pop(at, None)
        origins[at] = given[key]
    try:
        study = schema.Study.model_validate(raw)
    except ValidationError as exc:
        lines, from_options = describe_problems(exc, raw, origins, created)
        head = (f"the settings given with study file {path} have {len(lines)} problem(s)"
                if from_options == len(lines) else f"study file {path} has {len(lines)} problem(s)")
        raise ConfigError(f"{head}:\n" + "\n".join(f"  - {line}" for line in lines)) from None
    try:
        check_run_ids(study)
    except ValueError as exc:
        raise ConfigError(f"study file {path}: {exc}") from None
    study = study.given_with(origins)
    as_set = {key: at for key, (_, at) in applied.items()}
    _tell_overrides_replaced(as_set, given, path)
    _tell_sections_replaced(in_file, raw, overrides, as_set, origins, path)
    _tell_settings_turned_off(study, path)
    try:
        study = _with_paths_resolved(study, path)
    except (OSError, ValueError) as exc:   # a name too long for the file system, a NUL byte in it
        raise ConfigError(f"study file {path}: a path in it cannot be used ({exc}); fix data.path, model.weights "
                          "or pretrain.data.path") from None
    # what the file and the options gave, paths resolved: a key that differs later was changed in Python
    return study.given_with(origins, read=study.model_dump(warnings=False, exclude_unset=True))


def _tell_overrides_replaced(applied: Mapping[str, str], origins: Mapping[str, str], path: Path) -> None:
    """Warn of each override that a later one replaces whole: overrides apply in order, so ``--set
    training.batch_size=16 --set training={steps: 2}`` trained at the batch size the second gives (or its default)
    and the first changed nothing, without a word. ``applied``: each override's key as set, list items by index (so
    that arms.dp and arms.1 are one item); ``origins``: how each was given, by its key."""
    keys = list(applied)
    for i, key in enumerate(keys):
        at = applied[key].split(".")
        later = next((k for k in reversed(keys[i + 1:]) if schema.holds(applied[k], at)), None)
        if later is not None:
            _log.warning("%s (with study file %s) changes nothing: %s, given after it, replaces all of %s; give it "
                         "after that one to change it there", origins[key], path, origins[later], later)


def _node_at(raw: Any, path: list[str]) -> Any:
    """What ``raw`` holds at ``path`` (keys, a list item by its index as text), or None where nothing is."""
    for part in path:
        if isinstance(raw, dict):
            raw = raw.get(part)
        elif isinstance(raw, list) and part.isdigit() and int(part) < len(raw):
            raw = raw[int(part)]
        else:
            return None
    return raw


def _keys_dropped(in_file: dict, now: dict, later: set[str], prefix: str = "") -> list[str]:
    """The dotted keys (after ``prefix``) of ``in_file``, a section of the study file, that ``now`` (the section once
    every override is applied) no longer holds, inside the subsections both hold too, save those a ``later`` override
    (by their dotted key) replaced: that one is told for them, if anything is."""
    dropped = []
    for key, value in in_file.items():
        if key not in now:
            dropped.append(f"{prefix}{key}")
        elif isinstance(value, dict) and isinstance(now[key], dict) and f"{prefix}{key}" not in later:
            dropped += _keys_dropped(value, now[key], later, f"{prefix}{key}.")
    return dropped


def _shown(value: Any) -> str:
    """``value`` as it would be typed after --set KEY= (YAML on one line)."""
    return yaml.safe_dump(value, default_flow_style=True, width=math.inf).removesuffix("\n...\n").strip()


def _tell_sections_replaced(in_file: dict, raw: dict, overrides: Mapping[str, Any], applied: Mapping[str, str],
                            origins: Mapping[str, str], path: Path) -> None:
    """Warn of each override that replaced a section of the study file with one lacking keys the file gave
    (``--set training={steps: 2}`` over the file's ``training: {batch_size: 32}``): an override of a section replaces
    it, as YAML would, so the file's batch size went back to the default and q doubled without a word. Not refused:
    replacing a section may be meant. ``applied``: each override's key as set, list items by index. Told once per
    section, by the last override that replaced it, of the keys no override gave again (a later ``--set
    training.batch_size=32`` keeps batch_size); ``origins`` are keyed as ``applied``. Not where an earlier override
    replaced a section holding it (the file had no say there), nor for a list replaced whole or a section set to
    null (left at its defaults, as meant)."""
    keys = list(overrides)
    for i, key in enumerate(keys):
        at = applied[key].split(".")
        file_section, now = _node_at(in_file, at), _node_at(raw, at)
        if (not isinstance(overrides[key], dict) or not isinstance(file_section, dict) or not isinstance(now, dict)
                or any(schema.holds(applied[later], at) for later in keys[i + 1:])
                or any(schema.holds(applied[earlier], at) and applied[earlier] != applied[key]
                       for earlier in keys[:i])):
            continue
        inside = applied[key] + "."
        dropped = _keys_dropped(file_section, now, {applied[k].removeprefix(inside) for k in keys[i + 1:]
                                                    if applied[k].startswith(inside)})
        if not dropped:
            continue
        given, value = origins[applied[key]], overrides[key]
        # the example: a key the new section changes (not the arm's name it repeats), else any of it
        name, example = next(((k, v) for k, v in value.items() if file_section.get(k) != v),
                             next(iter(value.items()), ("KEY", "VALUE")))
        how = (f"--set {key}.{name}={_shown(example)}" if given.startswith("--set ") else
               f"the override {{'{key}.{name}': {example!r}}}")
        _log.warning("%s (with study file %s): replaces the study file's whole %s section, so the file's %s %s "
                     "dropped (back to %s); to change one key and keep the file's others, give that key "
                     "alone, e.g. %s", given, path, key, ", ".join(dropped), "is" if len(dropped) == 1 else "are",
                     "its default" if len(dropped) == 1 else "their defaults", how)


def _tell_settings_turned_off(study: schema.Study, path: Path) -> None:
    """Warn of each setting the study gives that another setting turns off (`Study.settings_turned_off`): it was
    ignored without a word, and a user took it for a change. Not refused: a study file is no mistake to stop for.
    Dropping it trains no finished run again (`schema.describe_removal` says why). One an option set
    (`Study.origin`, e.g. ``--set training.lr_schedule.gamma=0.5``) is blamed on the option: the study file may not
    hold it at all."""
    for key, why in study.settings_turned_off():
        given = study.origin(key)
        _log.warning("%s: %s changes nothing, as %s; remove it (%s)",
                     f"study file {path}" if given is None else f"{given} (with study file {path})", key, why,
                     schema.describe_removal(key))


def _with_paths_resolved(study: schema.Study, path: Path) -> schema.Study:
    """``study`` with its paths absolute where relative: a path written in the study file is read from the file's
    folder, one given outside it (an override: --set, as --data-path; `Study.origin`) from the current folder, where
    the user typed it; ConfigError where one does not exist."""
    origin = study.origin
    outside = {key for key in ("data.path", "model.weights", "pretrain.data.path") if origin(key) is not None}
    given = study.data.path
    data_path, rule = (None, "") if given is None else schema.absolute_path(given, path.parent,
                                                                            outside="data.path" in outside)
    if data_path is not None and data_path != given:
        study = study.model_copy(update={"data": study.data.model_copy(update={"path": data_path})})
    if data_path is not None and not data_path.exists():
        # a relative path: the absolute one tried, and the folder it was read from (the user may have meant another)
        tried = f" (tried {data_path}: {rule})" if rule else ""
        if "data.path" in outside:
            raise ConfigError(f"{origin('data.path')}: no such file or folder {given}{tried}; pass the dataset's "
                              "file or folder")
        kind = "FOLDER" if DATASET_SOURCES[study.data.source].reads_folder else "FILE"
        raise ConfigError(f"study file {path}: data.path {given} does not exist{tried}; fix the path in the file or "
                          f"pass --data-path {kind}")
    try:
        return schema.resolve_paths(study, path.parent, outside=outside)   # model.weights, pretrain.data.path
    except ConfigError as exc:     # "model.weights: no such file ...": from the option that gave it, or the file
        raise ConfigError(f"{origin(str(exc).split(':', 1)[0]) or f'study file {path}'}: {exc}") from None
