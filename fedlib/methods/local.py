"""Local (Solo): every client trains alone; nothing is communicated."""
from fedlib.methods.base import Method
from fedlib.methods.registry import register


@register
class Local(Method):
    name = "local"
    label = "Local"
    paper = "no communication"
    cite = None   # no paper: nothing is communicated
    shared = ()
    personalized = True
    has_global_model = False
