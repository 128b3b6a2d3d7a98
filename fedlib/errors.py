"""Errors that users see: one line, naming the field, the value and what is allowed."""


class ConfigError(ValueError):
    """A bad configuration, caught before any training starts."""

    def __init__(self, field: str, value, allowed: str):
        self.field, self.value, self.allowed = field, value, allowed
        super().__init__(f"{field}={value!r} is not allowed: {allowed}")

    def __reduce__(self):   # crosses process boundaries (worker pools) with its message intact
        return type(self), (self.field, self.value, self.allowed)


class DataNotFoundError(FileNotFoundError):
    """Dataset files are absent; the message says where they were looked for and how to get them."""


class ClientFailed(RuntimeError):
    """A client's Flower node answered with an error, or did not answer in time; ``detail``: the node's report."""

    def __init__(self, message: str, detail: str = ""):
        super().__init__(message)
        self.detail = detail

    def __reduce__(self):
        return type(self), (str(self), self.detail)


class WorkerDied(RuntimeError):
    """A worker process was killed (by a signal, or by the system when memory ran out); the message names the
    workers and how to see the error."""


class StorageFailed(RuntimeError):
    """A write failed mid-run (a full disk, a folder made read-only): the run stopped; the message says what
    was being written, why it failed and what was kept."""


class LockHeld(RuntimeError):
    """Another process holds a config's lock and cannot let it go (it is stopped): the message names it."""


class TrainingDiverged(RuntimeError):
    """A non-finite loss stopped the run; the checkpoint of the last finished round is kept."""


def check(condition: object, field: str, value, allowed: str) -> None:
    if not condition:
        raise ConfigError(field, value, allowed)


FLOAT32_MAX = 3.4028234663852886e38
FLOAT32_TINY = 1.1754943508222875e-38   # the smallest normal float32


def _rule(annotation):
    """(test, description) of a type annotation, or None for annotations not checked here."""
    import math
    import numbers
    import types
    import typing

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        rules = [_rule(a) for a in args if a is not type(None)]
        if any(r is None for r in rules):
            return None
        optional = type(None) in args
        return (lambda v: (optional and v is None) or any(test(v) for test, _ in rules),
                " or ".join(d for _, d in rules) + (" or None" if optional else ""))
    base = origin or annotation
    if base is bool:
        return (lambda v: isinstance(v, bool), "true or false")
    if base is int:
        return (lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool), "an integer")
    if base is float:   # the math runs in float32: a value beyond its range overflows deep inside PyTorch
        return (lambda v: isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)
                and abs(float(v)) <= FLOAT32_MAX, "a finite number (within float32's range, |x| <= 3.4e38)")
    if base is str:
        return (lambda v: isinstance(v, str), "a string")
    if base is dict:
        return (lambda v: isinstance(v, dict), "a mapping {key: value}")
    if base in (list, tuple):
        return (lambda v: isinstance(v, (list, tuple)), "a list")
    if base is typing.Sequence or getattr(base, "__name__", "") == "Sequence":
        return (lambda v: isinstance(v, (list, tuple)), "a list")
    return None


def check_type(field: str, value, annotation) -> None:
    """Refuse ``value`` unless it has the annotated type (bools are not numbers, numbers must be finite)."""
    rule = _rule(annotation)
    if rule is not None and not rule[0](value):
        raise ConfigError(field, value, rule[1])


def check_fields(obj, prefix: str = "", names: dict | None = None) -> None:
    """``check_type`` for every field of the dataclass instance ``obj`` (``names``: a field's name in messages)."""
    import dataclasses
    import typing

    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        if f.name in hints:
            check_type(prefix + (names or {}).get(f.name, f.name), getattr(obj, f.name), hints[f.name])


def check_arguments(fn, kwargs: dict, prefix: str = "") -> None:
    """``check_type`` for the keyword arguments of a call of ``fn`` that its signature annotates."""
    import typing

    hints = typing.get_type_hints(fn)
    for key, value in kwargs.items():
        if key in hints:
            check_type(prefix + key, value, hints[key])


class NotebookFailed(RuntimeError):
    """A notebook raised while papermill executed it (the book's builder, ``book/build.py``)."""
