"""Method registry: ``@register`` on a Method subclass makes it a config's ``method``; ``make_method`` builds one.

A new paper's method lives in its own module, decorated with ``@register``; importing the module (``fedlib.methods``
imports those it ships) is what makes its name known."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar, overload

from fedlib.errors import ConfigError

if TYPE_CHECKING:
    from fedlib.methods.base import Method

METHODS: dict[str, type[Method]] = {}
M = TypeVar("M", bound="type[Method]")


_KEEP = object()   # an identity argument not given: the class keeps what it states (or inherits)


@overload
def register(target: M) -> M: ...
@overload
def register(target: str, label: str | object = _KEEP, paper: str | object = _KEEP,
             cite: str | None | object = _KEEP) -> Callable[[M], M]: ...
def register(target, label=_KEEP, paper=_KEEP, cite=_KEEP):
    """Class decorator: register a method under its ``name`` (a name may not be taken by another class).

    ``@register("fedprox", "FedProx", "Li et al., MLSys 2020", cite="li2020fedprox")`` states the method's identity
    (its config name, how tables name it, its paper, its key in book/references.bib) in one line; bare ``@register``
    registers a class that states them as class attributes."""
    if isinstance(target, str):
        stated = {"name": target, "label": label, "paper": paper, "cite": cite}
        identity = {key: value for key, value in stated.items() if value is not _KEEP}

        def decorate(cls: M) -> M:
            for key, value in identity.items():
                setattr(cls, key, value)
            return register(cls)
        return decorate
    cls = target
    holder = METHODS.get(cls.name)
    if holder is not None and holder is not cls and holder.__qualname__ != cls.__qualname__:
        raise ValueError(f"method name {cls.name!r} of {cls.__module__}.{cls.__qualname__} is taken by "
                         f"{holder.__module__}.{holder.__qualname__}: give the class another `name`")
    METHODS[cls.name] = cls
    return cls


def make_method(name: str, **hyper) -> Method:
    if name not in METHODS:
        raise ConfigError("method", name, f"one of {', '.join(METHODS)}")
    return METHODS[name](**hyper)


def secure_aggregation_groups() -> dict[str, list[str]]:
    """The registered methods SecAgg+ serves (``Method.sums_uploads()``: the server needs only the sum of the
    uploads) and those it refuses, each sorted: what validation, the Flower page and its tests read."""
    served = sorted(name for name, cls in METHODS.items() if cls.sums_uploads())
    return {"served": served, "refused": sorted(name for name in METHODS if name not in served)}
