"""Local (Solo): every client trains alone; nothing is communicated."""
from fedlib.methods.base import Method
from fedlib.methods.registry import register


@register("local", "Local", "no communication", cite=None)   # no paper: nothing is communicated
class Local(Method):
    shared = ()
    personalized = True
    has_global_model = False
