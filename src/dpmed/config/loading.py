"""Read a study file into a :class:`~dpmed.config.schema.Study`, or fail naming the file and the key.

Precedence is command line over file over defaults: ``overrides`` (``{"training.epochs": 2}``) are applied to the
parsed YAML before validation, so they are checked exactly like keys written in the file; a problem they cause is
blamed on them (``origins`` says how the user gave each, e.g. ``--set training.epochs=abc``), not on the file.
A value outside a fixed set of choices (a mechanism, a model, an optimiser) gets the closest choice as a hint.
"""

from __future__ import annotations

import difflib
import math
import re
from importlib import resources
from pathlib import Path
from typing import Any, Hashable, Mapping, get_args

import yaml
from pydantic import BaseModel, ValidationError

from dpmed.config import schema
from dpmed.config.plans import check_run_ids
from dpmed.data import DATASET_SOURCES
from dpmed.errors import ConfigError
from dpmed.mechanisms import MECHANISMS

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
        return loader.construct_document(node)
    finally:
        loader.dispose()


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


def _field_names() -> set[str]:
    """Every key a study file may hold, for "did you mean" hints: the schema's and every registered arm's."""
    models = [obj for obj in vars(schema).values() if isinstance(obj, type) and issubclass(obj, BaseModel)]
    names: set[str] = set()
    for model in models + [info.arm for info in MECHANISMS.values()]:
        names.update(model.model_fields)
    return names


def _choices(text: str) -> list[str]:
    """"'a', 'b' or 'c'" (pydantic's list of allowed values) -> ["a", "b", "c"]; unquoted numbers ("1 or 3") too."""
    return re.findall(r"'([^']*)'", text) or [c for c in re.split(r",\s*|\s+or\s+", text.strip()) if c]


def _closest(value: object, choices: list[str]) -> str:
    close = difflib.get_close_matches(str(value), choices, n=1, cutoff=0.5) if isinstance(value, str) else []
    return f" (did you mean {close[0]!r}?)" if close else ""


def _is_union_member(part: str | int) -> bool:
    """pydantic names the member of a union a value failed against in the location (``int``, ``literal['auto']``,
    ``NormalizeConfig``); a study key is snake_case."""
    return isinstance(part, str) and ("[" in part or "(" in part or part[:1].isupper()
                                      or part in {"int", "float", "str", "bool", "none"})


def _location(error: Mapping[str, Any]) -> list[str | int]:
    """The key path of a problem: a list's item by its index (an int, as pydantic gives it), a mapping's key as text,
    even one that reads as a number (``training.5`` from a --set is an unknown key, not an item)."""
    # pydantic puts the discriminator's value (the mechanism) into an arm's location: a user wrote arms[0].scale.
    # An unknown key is the user's own, last, whatever its spelling (Name, none, arms[0] from a --set)
    loc = list(error["loc"])
    own = loc[-1:] if error["type"] in ("extra_forbidden", "invalid_key") else []
    return [p for p in loc[:len(loc) - len(own)] if p not in MECHANISMS and not _is_union_member(p)] + own


_SECTION_TYPES = ("model_type", "model_attributes_type", "dict_type")


def _section_model(error: Mapping[str, Any]) -> type[BaseModel] | None:
    """The schema class of the section a section error is about (pydantic names it in its context), or None."""
    model = vars(schema).get(str((error.get("ctx") or {}).get("class_name", "")))
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _a_mapping(error: Mapping[str, Any]) -> str:
    """What a section wants, in a study file's words: pydantic says "a valid dictionary or instance of
    TrainingConfig", a class the user never sees. A section of one or two keys shows them ({last_blocks: ...})."""
    model = _section_model(error)
    keys = [] if model is None else list(model.model_fields)
    if 0 < len(keys) <= 2:
        return "a mapping such as {" + ", ".join(f"{k}: ..." for k in keys) + "}"
    return "a mapping of settings (key: value lines, or {key: value, ...})"


def _word_of_a_section(error: Mapping[str, Any], got: object) -> str:
    """A hint where a section was given one of its keys' values (``lr_schedule: cosine``): the key it belongs to."""
    model = _section_model(error)
    if model is None or not isinstance(got, str):
        return ""
    keys = [k for k, f in model.model_fields.items() if got in get_args(f.annotation)]
    return f"; write {{{keys[0]}: {got}}}" if len(keys) == 1 else ""


def _expected(error: Mapping[str, Any]) -> str:
    """What one member of a union wanted: "a valid integer", "one of auto"."""
    if error["type"] == "literal_error":
        return "one of " + ", ".join(_choices(str((error.get("ctx") or {}).get("expected", ""))))
    if error["type"] in _SECTION_TYPES:
        return _a_mapping(error)
    return error["msg"].removeprefix("Value error, ").removeprefix("Input should be ").strip()


def _merge_unions(errors: list[Mapping[str, Any]]) -> list[tuple[Mapping[str, Any], list[str | int], str | None]]:
    """(error, location, text or None) per problem: a value that fits no member of a union (``epochs: abc`` for
    ``int | "auto"``) is one problem, not one per member."""
    groups: dict[tuple[str | int, ...], list[Mapping[str, Any]]] = {}
    for error in errors:
        groups.setdefault(tuple(_location(error)), []).append(error)
    # a mapping given where a union takes a word or a section (``trainable: {last_blocks: 0}``) meant the section: its
    # member's problem inside it is the one to fix, not also "is not one of all, head"
    for loc in [loc for loc in groups if any(other[:len(loc)] == loc and len(other) > len(loc) for other in groups)]:
        groups[loc] = [e for e in groups[loc] if not (e["type"] == "literal_error" and isinstance(e.get("input"), dict)
                                                      and _is_union_member(e["loc"][-1]))]
        if not groups[loc]:
            del groups[loc]
    problems = []
    for loc, group in groups.items():
        if len(group) == 1:
            problems.append((group[0], list(loc), None))
            continue
        got = group[0].get("input")
        choices = [c for e in group if e["type"] == "literal_error"
                   for c in _choices(str((e.get("ctx") or {}).get("expected", "")))]
        expected = " or ".join(_expected(e) for e in group)
        problems.append((group[0], list(loc), f"{_where(list(loc))}: should be {expected} (got {got!r})"
                                              f"{_closest(got, choices)}"))
    return problems


def _where(loc: list[str | int]) -> str:
    """A location as a study file's reader writes it: arms[1].target_epsilon, a list's item in brackets."""
    where = ""
    for part in loc:
        where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else part)
    return where


# pydantic's bound errors ("Input should be greater than or equal to 1"), in a study file's reader's words: by the
# error's type, the name of its bound in the error's context, the bound and what to do.
_BOUNDS = {
    "greater_than": ("gt", "above {:g}", "raise it above {:g}"),
    "greater_than_equal": ("ge", "at least {:g}", "raise it to {:g} or more"),
    "less_than": ("lt", "below {:g}", "lower it below {:g}"),
    "less_than_equal": ("le", "at most {:g}", "lower it to {:g} or less"),
}

# pydantic's type errors ("Input should be a valid integer"), with what to write instead
_TYPES = {
    "int_type": "must be a whole number, got {got}; write it in digits (e.g. 2)",
    "float_type": "must be a number, got {got}; write it in digits (e.g. 0.5 or 1e-5)",
    "bool_type": "must be true or false, got {got}; write true or false",
    "string_too_short": "must hold at least {min_length} character(s), got {got}; write it out",
    "list_type": "must be a list, got {got}; write its items in brackets ([a, b, ...])",
    "finite_number": "must be a finite number, got {got}; write a number in digits (e.g. 0.5 or 1e-5)",
}


def _section_keys(section: list[str | int]) -> list[str]:
    """The keys the section at ``section`` holds (``privacy_budget``: epsilon, delta, accountant), where the schema
    alone says so; [] for an arm, whose keys depend on its mechanism. A "did you mean" offers these first: 'extra'
    in privacy_budget was offered the top level's 'pretrain'."""
    model: Any = schema.Study
    for part in section:
        if not isinstance(part, str) or part not in model.model_fields:
            return []
        found = [t for t in _members(model.model_fields[part].annotation) if isinstance(t, type)
                 and issubclass(t, BaseModel)]
        if len(found) != 1:
            return []
        model = found[0]
    return list(model.model_fields)


def _members(annotation: Any) -> list[Any]:
    """The types a field's annotation names: ``ScheduleConfig``, ``AugmentationConfig | None``'s two."""
    args = get_args(annotation)
    return [annotation] if not args else [m for a in args for m in _members(a)]


def _describe(error: Mapping[str, Any], loc: list[str | int]) -> str:
    where = _where(loc)
    kind, msg, ctx = error["type"], error["msg"], error.get("ctx") or {}
    if kind == "extra_forbidden":
        key = str(loc[-1] if loc else error["loc"][-1])
        own = _section_keys(loc[:-1])
        if key in _field_names():   # a real key, in another section: suggesting itself would not help
            hint = " (valid elsewhere in a study, not here: check the section it is in, or the arm's mechanism)"
        else:
            close = difflib.get_close_matches(key, own or sorted(_field_names()), n=1)
            hint = (f" (did you mean {close[0]!r}?)" if close else
                    f" ({_where(loc[:-1])} holds {', '.join(own)})" if own and loc[:-1] and len(own) <= 8 else "")
        return f"{where}: unknown key{hint}; remove or rename it"
    if kind == "missing":
        return f"{where}: required key is missing"
    if kind == "invalid_key":   # pydantic's location of it is the key as text, or (a boolean) as 0 or 1
        key = error.get("input")
        key = "null" if key is None else str(key).lower() if isinstance(key, bool) else key     # in YAML's words
        return (f"{_where(loc[:-1]) or 'the top level'}: the key {key} is not text (YAML reads a key "
                "such as 1, 3.5, yes or null as a number, true or false, or null); quote it (\"1\": ...), or remove it")
    if kind == "union_tag_not_found":   # an arm without ``mechanism``: pydantic speaks of its discriminator
        return (f"{where}.mechanism: required key is missing; say which mechanism the arm uses, one of "
                f"{', '.join(MECHANISMS)} (e.g. mechanism: dp_sgd)")
    if kind in _SECTION_TYPES:
        got = error.get("input")
        if got is None and loc and isinstance(loc[-1], int):   # ``- `` with nothing after it, or an arm set to null
            return (f"{where}: must be {_a_mapping(error)}, got null (an empty item of the list); write its "
                    "settings in it, or delete the item from the list in the study file")
        if got is None:   # ``data:`` with nothing under it, or ``data: null``
            return (f"{where or '(top level)'}: must be {_a_mapping(error)}, got null (nothing under the key); write "
                    "its settings under it, or remove the key to keep the defaults")
        return f"{where or '(top level)'}: must be {_a_mapping(error)}, got {got!r}{_word_of_a_section(error, got)}"
    if kind == "union_tag_invalid":   # an arm's mechanism that is not registered
        choices = _choices(str(ctx.get("expected_tags", "")))
        tag = ctx.get("tag")
        return (f"{where}.mechanism: {tag!r} is not a mechanism{_closest(tag, choices)}; use one of "
                f"{', '.join(choices)}")
    if kind == "literal_error":
        choices = _choices(str(ctx.get("expected", "")))
        got = error.get("input")
        return f"{where}: {got!r} is not one of {', '.join(choices)}{_closest(got, choices)}"
    got = error.get("input")
    octal = isinstance(got, str) and re.fullmatch(r"[-+]?0[0-9_]+", got)   # its own hint, below
    if kind in _TYPES and not isinstance(got, (dict, list)) and not octal:
        shown = "null" if got is None else str(got).lower() if isinstance(got, bool) else repr(got)   # YAML's words
        return f"{where}: {_TYPES[kind].format(got=shown, **ctx)}"
    if kind in ("int_type", "float_type", "bool_type", "list_type") and isinstance(got, (dict, list)):   # several
        shown = f"{'a list' if isinstance(got, list) else 'a section'} ({got!r:.60})"
        return f"{where}: {_TYPES[kind].format(got=shown, **ctx)}"
    if kind in _BOUNDS:
        name, bound, fix = _BOUNDS[kind]
        if isinstance(got, float) and math.isnan(got):    # .nan fails every bound: raising or lowering it cannot help
            wanted = f"a number {bound.format(ctx[name])}"
            return f"{where}: must be {wanted}, got nan; write {wanted} in its place"
        return f"{where}: must be {bound.format(ctx[name])}, got {got!r}; {fix.format(ctx[name])}"
    if kind == "string_type" and (got is None or isinstance(got, (int, float, list)) and not isinstance(got, bool)):
        # pydantic's "Input should be a valid string (got None)" said neither what YAML read nor what to write
        if got is None:
            return (f"{where}: must be text, got null (nothing after the key, or null or ~); write the text after "
                    "the key")
        if isinstance(got, list):
            return f"{where}: must be text, got a list; write one text value, not a list in brackets"
        return f"{where}: must be text, got {got!r} (YAML reads it as a number); quote it: '{got}'"
    shown = "" if isinstance(got, (dict, list)) or "got" in msg else f" (got {got!r})"
    if isinstance(got, bool) and kind == "string_type":   # YAML 1.1: yes, no, on, off, true, false are booleans
        shown += f"; YAML reads yes/no/on/off as true/false: quote the name, e.g. '{'yes' if got else 'no'}'"
    if octal:   # YAML 1.1 would read 010 as octal 8
        shown += "; an integer is read in decimal without leading zeros: write it without them"
    if isinstance(got, dict) and kind == "string_type":   # name=a: b, or name: a: b
        shown += "; YAML read the text after a colon and a space as a section: quote the whole value"
    return f"{where or '(top level)'}: {msg.removeprefix('Value error, ')}{shown}"


def _colon_hint(raw: Any, loc: list[str | int]) -> str:
    """A hint where the mapping that holds a problem has a key with a colon and no space after it: YAML reads
    ``{name:dp, mechanism:dp_sgd}`` as the keys 'name:dp' and 'mechanism:dp_sgd', each null, and the problem
    (a required key missing, an unknown key) does not say why."""
    node, holder = raw, None
    for part in loc:
        if isinstance(node, dict):
            holder = node
        if isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            break
    if isinstance(node, dict):
        holder = node
    joined = [k for k in holder or {} if isinstance(k, str) and re.fullmatch(r"[^\s:]+:\S.*", k)]
    if not joined:
        return ""
    return (f"; YAML read {joined[0]!r} as one key (a colon ends a key only where a space follows it): write "
            f"`key: value` with a space after the colon ({joined[0].replace(':', ': ', 1)})")


def _empty_value(origin: str, error: Mapping[str, Any]) -> str | None:
    """What a problem of ``--set KEY=`` is, where nothing follows the '=' (YAML reads nothing as null): pydantic's
    "Input should be a valid string (got None)" did not say that the value was left out."""
    key, _, value = origin.removeprefix("--set ").partition("=")
    if not origin.startswith("--set ") or value.strip() or error.get("input") is not None:
        return None
    return (f"the value is empty (nothing after '=', read as null); --set KEY=VALUE needs a value after the '=', "
            f"e.g. --set {key}=VALUE")


def _dotted(key: str) -> list[str]:
    return key.split(".")


def _made_by(section: list[str], origins: Mapping[str, str], created: Mapping[str, list[list[str]]]) -> str | None:
    """The options that made ``section`` (``created``: the sections each option's key added, absent or null in the
    file before), or None where the file has it."""
    return ", ".join(origins[k] for k in origins if section in created.get(k, [])) or None


def _blame(loc: list[str | int], origins: Mapping[str, str], kind: str = "",
           created: Mapping[str, list[list[str]]] | None = None) -> tuple[str | None, list[str]]:
    """(the option that set this location or a section holding it, options that set something inside it). An
    unknown key (``kind`` extra_forbidden) that an option made is that option's mistake: --set trainingg.epochs=1,
    not the file's."""
    path = [str(p) for p in loc]      # an option's key names a list's item by its index as text
    exact = next((origins[k] for k in origins if path[:len(_dotted(k))] == _dotted(k)), None)
    inside = [origins[k] for k in origins if _dotted(k)[:len(path)] == path and _dotted(k) != path]
    makers = _made_by(path, origins, created or {}) if exact is None and kind == "extra_forbidden" else None
    return (makers, []) if makers else (exact, inside)


def _describe_missing(section: list[str | int], keys: list[str], makers: str) -> str:
    """The required keys a section that options made lacks, as the options' problem: the file never had the section,
    and the user who added it with --set pretrain.training.epochs=2 learns what else a pretrain section needs."""
    name = _where(section)
    needed = keys[0] if len(keys) == 1 else f"{', '.join(keys[:-1])} and {keys[-1]}"
    them = "it" if len(keys) == 1 else "them"
    again = f", or give {them} with --set too" if makers.startswith("--set ") else ""
    return (f"{makers}: {name}: the study file has no {name} section, so the option adds one, and a {name} section "
            f"also needs {needed}; write the section with {them} in the study file{again}")


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
        node[last] = value       # an unknown key it sets is the option's by its own path (`_blame`)
    return created, ".".join(parts)


def _problems(exc: ValidationError, raw: dict, origins: Mapping[str, str],
              created: Mapping) -> tuple[list[str], int]:
    """One line per problem of a study that failed validation, in pydantic's order (the keys missing from a section
    that options made share one), and how many of them the options (``origins``) caused."""
    lines: dict[object, str] = {}
    lacking: dict[tuple[str, tuple[str | int, ...]], list[str]] = {}
    from_options = 0
    for at, (error, loc, merged) in enumerate(_merge_unions(exc.errors())):
        section = loc[:-1]
        makers = _made_by([str(p) for p in section], origins, created) if error["type"] == "missing" else None
        if makers is not None:
            group = (makers, tuple(section))
            from_options += group not in lacking
            lacking.setdefault(group, []).append(str(loc[-1]))
            lines[group] = _describe_missing(section, lacking[group], makers)
            continue
        text = (merged or _describe(error, loc)) + _colon_hint(raw, loc)
        exact, inside = _blame(loc, origins, error["type"], created)
        if exact is not None:
            from_options += 1
            text = f"{exact}: {_empty_value(exact, error) or text}"
        elif inside:
            text += f" (after {', '.join(inside)})"
        lines[at] = text
    return list(lines.values()), from_options


def check_study(study: schema.Study) -> schema.Study:
    """``study`` validated again: a Study edited with pydantic's ``model_copy(update=...)`` skips validation, and
    an invalid one would fail late, deep in planning, in pydantic's words. Raises ConfigError as load_study does."""
    raw = study.model_dump(warnings=False)
    try:
        checked = schema.Study.model_validate(raw)
    except ValidationError as exc:
        lines, _ = _problems(exc, raw, {}, {})
        raise ConfigError(f"the Study passed to run_study has {len(lines)} problem(s):\n"
                          + "\n".join(f"  - {line}" for line in lines)) from None
    try:
        check_run_ids(checked)
    except ValueError as exc:
        raise ConfigError(f"the Study passed to run_study: {exc}") from None
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
    applied = {key: _apply(raw, key, value, origins[key]) for key, value in overrides.items()}
    # keyed by the path as set, list items by index: a problem's location names an arm by its index
    created = {at: made for made, at in applied.values()}
    origins = {applied[key][1]: origin for key, origin in origins.items()}
    try:
        study = schema.Study.model_validate(raw)
    except ValidationError as exc:
        lines, from_options = _problems(exc, raw, origins, created)
        head = (f"the settings given with study file {path} have {len(lines)} problem(s)"
                if from_options == len(lines) else f"study file {path} has {len(lines)} problem(s)")
        raise ConfigError(f"{head}:\n" + "\n".join(f"  - {line}" for line in lines)) from None
    try:
        check_run_ids(study)
    except ValueError as exc:
        raise ConfigError(f"study file {path}: {exc}") from None
    try:
        return _with_paths_resolved(study, path, origins)
    except (OSError, ValueError) as exc:   # a name too long for the file system, a NUL byte in it
        raise ConfigError(f"study file {path}: a path in it cannot be used ({exc}); fix data.path, model.weights "
                          "or pretrain.data.path") from None


def _with_paths_resolved(study: schema.Study, path: Path, origins: Mapping[str, str]) -> schema.Study:
    """``study`` with its paths absolute where relative: a path written in the study file is read from the file's
    folder, one given outside it (an override: --set, as --data-path) from the current folder, where the user typed
    it; ConfigError where one does not exist."""
    def origin(key: str) -> str | None:
        """How the user gave ``key`` outside the file (e.g. "--set model.weights=w.pt"), or None."""
        return next((said for at, said in origins.items() if key == at or key.startswith(f"{at}.")), None)
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
