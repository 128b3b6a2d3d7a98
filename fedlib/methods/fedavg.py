"""FedAvg (McMahan et al., 2017): sample-size weighted average of all parameters. The base class is FedAvg."""
from fedlib.methods.base import Method
from fedlib.methods.registry import register


@register
class FedAvg(Method):
    """The base class states FedAvg: its name, label, paper and every hook."""
