"""FedAvg (McMahan et al., 2017): sample-size weighted average of all parameters. The base class is FedAvg."""
from fedlib.methods.base import Method


class FedAvg(Method):
    name = "fedavg"
