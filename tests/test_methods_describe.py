"""The protocol table reads what a method says of its evaluation hooks (``describes_eval_params``,
``describes_prediction``): a method class that overrides ``eval_params`` or ``predict`` must say what it does
in the same class or below it, or the table would describe the default for it."""
import pytest

from fedlib.methods import METHODS, make_method
from fedlib.methods.base import Method


def owner(cls, name):
    """The class of ``cls``'s MRO that defines ``name``."""
    return next(c for c in cls.__mro__ if name in c.__dict__)


@pytest.mark.parametrize("name", sorted(METHODS))
@pytest.mark.parametrize("hook, description", [("eval_params", "describes_eval_params"),
                                               ("predict", "describes_prediction")])
def test_a_method_that_overrides_an_evaluation_hook_describes_it(name, hook, description):
    cls = METHODS[name]
    defined, described = owner(cls, hook), owner(cls, description)
    assert defined is Method or issubclass(described, defined), \
        f"{cls.__name__} overrides {hook} in {defined.__name__} but {description} comes from {described.__name__}"
    text = getattr(make_method(name), description)()
    assert text is None or (isinstance(text, str) and text and not text.endswith("."))


def test_descriptions_follow_the_hyperparameters():
    assert make_method("fedproto", predict_by="prototype").describes_prediction() == "the nearest global prototype"
    assert make_method("fedproto").describes_prediction() == "the largest logit"   # its default (the official code)
    assert make_method("fedavg").describes_prediction() == "the largest logit"
    assert make_method("fedavg").describes_eval_params() is None
