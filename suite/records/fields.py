"""Reading a stored JSON table field by field. Every read checks the value's type, and a missing
or wrong one is a `DamagedRecord` naming the field's dotted path (`metrics.images_per_sec.mean`)
and what is allowed: the typed records' `from_dict` is their validation, so nothing that loads
lacks what the report reads."""

import dataclasses
import json
import types
import typing
from collections.abc import Callable

from suite.errors import RecordError


class DamagedRecord(RecordError):
    """One record cannot be read as its type (a field missing or of the wrong type): loading
    skips it with a warning naming file:line, as it skips a torn line; writing refuses it."""

    def __init__(self, where: str, problem: str):
        self.where, self.problem = where, problem
        super().__init__(f"{where}: {problem}")


Kind = tuple[Callable[[object], bool], str]  # (check, what is allowed)


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


INTEGER: Kind = (_integer, "an integer")
NUMBER: Kind = (_number, "a number")
STRING: Kind = (lambda v: isinstance(v, str), "a string")
BOOLEAN: Kind = (lambda v: isinstance(v, bool), "true or false")
TABLE: Kind = (lambda v: isinstance(v, dict), "a table")
LIST: Kind = (lambda v: isinstance(v, list), "a list")
NUMBERS: Kind = (lambda v: isinstance(v, list) and all(map(_number, v)), "a list of numbers")
_REQUIRED = object()


def short(value) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


class Table:
    """A stored JSON object being read; `where` is its file:line, `path` its dotted name in the
    record ("" for the record itself)."""

    def __init__(self, values, where: str, path: str = ""):
        if not isinstance(values, dict):
            what = f"field {path!r}" if path else "a record"
            raise DamagedRecord(where, f"{what} must be a JSON object, not {short(values)}")
        self.values, self.where, self.path = values, where, path

    def name(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def damaged(self, key: str, problem: str) -> DamagedRecord:
        return DamagedRecord(self.where, f"field {self.name(key)!r} {problem}")

    def __call__(self, key: str, kind: Kind, null: bool = False, default=_REQUIRED):
        """The field `key`, checked to be of `kind` (or null if `null`); `default` when it is
        absent, if given (fields older versions did not write)."""
        if key not in self.values:
            if default is not _REQUIRED:
                return default
            raise DamagedRecord(self.where, f"record lacks required field {self.name(key)!r}")
        value = self.values[key]
        check, allowed = kind
        if (value is None and null) or check(value):
            return value
        allowed += " or null" if null else ""
        raise self.damaged(key, f"= {short(value)} is invalid; allowed: {allowed}")

    def table(self, key: str, null: bool = False, default=_REQUIRED, kind: Kind = TABLE):
        """The field `key` as a Table (None if null or absent with a None default); `kind` says
        what is allowed, e.g. the fields of the table."""
        value = self(key, kind, null, default)
        return None if value is None else Table(value, self.where, self.name(key))

    def tables(self, key: str, null: bool = False, default=_REQUIRED) -> list["Table"] | None:
        """A list of tables, each read as a Table (`trials.3`)."""
        values = self(key, LIST, null, default)
        if values is None:
            return None
        return [Table(v, self.where, f"{self.name(key)}.{i}") for i, v in enumerate(values)]

    def choice(self, key: str, choices: tuple[str, ...]) -> str:
        value = self(key, STRING)
        if value not in choices:
            raise self.damaged(key, f"= {value!r} is not one of {', '.join(choices)}")
        return value


def _kind(base) -> Kind | None:
    return {int: INTEGER, float: NUMBER, str: STRING, bool: BOOLEAN, dict: TABLE}.get(base)


def _read_value(t: Table, key: str, hint, default, metadata):
    """Field `key` of `t` as the type `hint` says: a scalar, a nested record type (its own
    `read`, else read field by field), a tuple of either, or `X | None` (null allowed)."""
    args = typing.get_args(hint)
    null = type(None) in args
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        (hint,) = [a for a in args if a is not type(None)]
    if "read" in metadata:
        return metadata["read"](t, key, null, default)
    # nested types and tuples: their fields default to None
    if dataclasses.is_dataclass(hint):
        names = ", ".join(f.metadata.get("key", f.name) for f in dataclasses.fields(hint))
        table = t.table(key, null, default, (TABLE[0], f"a table {{{names}}}"))
        return None if table is None else read(hint, table)
    if typing.get_origin(hint) is tuple:
        (item, _) = typing.get_args(hint)
        if dataclasses.is_dataclass(item):
            tables = t.tables(key, null, default)
            return None if tables is None else tuple(read(item, table) for table in tables)
        values = t(key, NUMBERS, null, default)
        return None if values is None else tuple(values)
    value = t(key, _kind(hint), null, default)
    choices = metadata.get("choices")
    if choices and value is not None and value not in choices:
        raise t.damaged(key, f"= {value!r} is not one of {', '.join(choices)}")
    return value


def _mismatch(value, hint, path: str, null: bool = False) -> tuple[str, str, object] | None:
    """(dotted path, what is allowed, the value there) of the first part of `value` that is not
    of type `hint` (`null`: None is allowed too), or None when all of it is."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        null = null or type(None) in typing.get_args(hint)
        (hint,) = [a for a in typing.get_args(hint) if a is not type(None)]
    if value is None:
        return None if null else (path, "not null", value)
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, hint):
            return path, f"a table {hint.__name__}", value
        hints = typing.get_type_hints(hint)
        parts = (
            _mismatch(getattr(value, f.name), hints[f.name], f"{path}.{f.name}")
            for f in dataclasses.fields(hint)
        )
        return next((found for found in parts if found), None)
    if (typing.get_origin(hint) or hint) is tuple:
        if not isinstance(value, tuple):
            return path, "a list", value
        items = typing.get_args(hint)[:1]  # tuple[X, ...]; a bare tuple may hold anything
        parts = (_mismatch(v, items[0], f"{path}.{i}") for i, v in enumerate(value) if items)
        return next((found for found in parts if found), None)
    check, allowed = _kind(hint) or (lambda v: isinstance(v, hint), f"a {hint.__name__}")
    return None if check(value) else (path, allowed, value)


def check_loaded(value, t: Table, key: str, nullable: bool = False):
    """`value`, read from the table `key` of `t` by another package's `from_dict` (lms's report
    types, which take what a table holds as it is), checked against its type's annotations as
    `read_fields` checks the suite's own types: a part of the wrong type is a DamagedRecord
    naming its path, so that what loads is what the type says. `nullable`: its own fields may
    be None whatever they say (PlanReport reads a key an older record lacks as None)."""
    hints = typing.get_type_hints(type(value))
    for field in dataclasses.fields(value):
        found = _mismatch(getattr(value, field.name), hints[field.name], field.name, nullable)
        if found:
            path, allowed, part = found
            problem = f"= {short(part)} is invalid; allowed: {allowed}"
            raise t.damaged(f"{key}.{path}", problem)
    return value


def read(cls, t: Table):
    """An instance of the dataclass `cls` from the table `t`: by its `from_table` if it has one,
    else field by field (`read_fields`)."""
    return cls.from_table(t) if "from_table" in vars(cls) else read_fields(cls, t)


def read_fields(cls, t: Table):
    """An instance of the dataclass `cls` from the table `t`, field by field with the types its
    annotations give (a field's metadata may rename its `key`, list its `choices`, or `read`
    it); a field with a default may be absent."""
    hints = typing.get_type_hints(cls)
    values = {}
    for field in dataclasses.fields(cls):
        default = field.default
        if field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        if default is dataclasses.MISSING:
            default = _REQUIRED
        key = field.metadata.get("key", field.name)
        values[field.name] = _read_value(t, key, hints[field.name], default, field.metadata)
    return cls(**values)


def fields_of(record) -> dict:
    """A dataclass's fields in their JSON form (a field's metadata may rename its `key`), without
    the nulls if the class is SPARSE (metrics store only what was measured) or the field's
    metadata says `sparse` (a field added later: older records write back as they were read)."""
    sparse = getattr(record, "SPARSE", False)
    values = {}
    for field in dataclasses.fields(record):
        value = getattr(record, field.name)
        if not ((sparse or field.metadata.get("sparse")) and value is None):
            values[field.metadata.get("key", field.name)] = write(value)
    return values


def write(value):
    """The JSON form of a record's value: a type's own `to_dict` (TrialParams' canonical form),
    a dataclass field by field, tuples as lists."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if dataclasses.is_dataclass(value):
        return fields_of(value)
    if isinstance(value, tuple | list):
        return [write(v) for v in value]
    return value
