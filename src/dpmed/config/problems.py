"""A study that failed validation, in a study file's words: one line per problem, naming the key as the user wrote
it (``arms[1].target_epsilon``), what it should be and what to do, and blaming an option (``--set``) for what it set.

pydantic's own messages speak of its classes and union members ("a valid dictionary or instance of TrainingConfig",
one error per member a value failed); a value outside a fixed set of choices (a mechanism, a model, an optimiser)
gets the closest choice as a hint. Kept apart from reading the file (`dpmed.config.loading`), which decides what
the YAML holds and which options were applied; this only words what the schema refused.
"""

from __future__ import annotations

import difflib
import math
import re
from typing import Any, Mapping, Sequence, get_args

from pydantic import BaseModel, ValidationError

from dpmed.config import schema
from dpmed.mechanisms import MECHANISMS

__all__ = ["describe_problems"]


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


def _merge_unions(errors: Sequence[Mapping[str, Any]]) -> list[tuple[Mapping[str, Any], list[str | int], str | None]]:
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
    problems: list[tuple[Mapping[str, Any], list[str | int], str | None]] = []
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
        given = error.get("input")
        key = "null" if given is None else str(given).lower() if isinstance(given, bool) else given    # in YAML's words
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
    exact = schema.given_by(origins, path)     # options apply in their order (`dpmed.cli`): the last gave it
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
    article = "an" if name.startswith(tuple("aeiou")) else "a"    # an arms[2].audit section, a pretrain section
    return (f"{makers}: {name}: the study file has no {name} section, so the option adds one, and {article} {name} "
            f"section also needs {needed}; write the section with {them} in the study file{again}")


def describe_problems(exc: ValidationError, raw: dict, origins: Mapping[str, str],
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
