"""LG-FedAvg (Liang et al., 2020): local representation (body) per client, global head averaged."""
from fedlib.methods.base import Method
from fedlib.methods.registry import register


@register("lg_fedavg", "LG-FedAvg", "Liang et al., arXiv:2001.01523", cite="liang2020lgfedavg")
class LGFedAvg(Method):
    shared = ("head",)
    personalized = True
    has_global_model = False
