"""Methods: every class decorated with ``@register`` (fedlib.methods.registry). Importing this package imports
every module in its folder, which registers the methods fedlib ships; each is also a name of the package
(``from fedlib.methods import FedRep``)."""
import importlib
import pkgutil

from fedlib.methods.base import Method
from fedlib.methods.registry import METHODS, make_method, register, secure_aggregation_groups

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

globals().update({cls.__name__: cls for cls in METHODS.values()})

__all__ = ["METHODS", "Method", "make_method", "register", "secure_aggregation_groups",
           *(cls.__name__ for cls in METHODS.values())]
