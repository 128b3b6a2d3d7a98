"""FedPer (Arivazhagan et al., 2019): base layers (body) averaged, personal head kept local."""
from fedlib.methods.base import Method
from fedlib.methods.registry import register


@register("fedper", "FedPer", "Arivazhagan et al., arXiv:1912.00818", cite="arivazhagan2019fedper")
class FedPer(Method):
    shared = ("body", "projector")
    personalized = True
    has_global_model = False
