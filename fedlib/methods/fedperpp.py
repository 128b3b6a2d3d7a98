"""FedPer++ (Xu, Yan & Huang, IJCNN 2022), in an assumed form: FedPer (shared body and projector, personal
classifier) whose shared layers are kept near the received global ones by a proximal term,
CE + (mu/2) ||theta_shared - w_shared||^2, against the overfitting of the feature extractor to skewed
local data. The paper's text is not available here; this is fedlib's reading of its published summary
(FedPer improved by regularising the shared feature extractor towards the global one) and is labelled as
such wherever it is reported. mu = 0.01 (FedProx's value in this library)."""
from fedlib.aggregate import select
from fedlib.losses import cross_entropy, proximal
from fedlib.methods.fedper import FedPer
from fedlib.methods.fedprox import ProxHyper
from fedlib.methods.registry import register


@register("fedperpp", "FedPer++", "Xu, Yan & Huang, IJCNN 2022 (assumed form)", cite="xu2022fedperpp")
class FedPerPlus(FedPer):
    Hyper = ProxHyper

    def local_loss(self, out, batch, params, ctx):
        shared = select(params, self.shared)
        return cross_entropy(out.logits, batch) + 0.5 * self.hp.mu * proximal(shared, ctx.received["params"])
