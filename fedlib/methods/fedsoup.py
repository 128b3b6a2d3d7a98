"""FedSoup (Chen, Jiang, Dou, Wang & Li, MICCAI 2023): personalization and generalization by selective
model interpolation ("model soups").

Clients train as in FedAvg from the received global model. Each client keeps a temporal pool of the
last ``pool`` global models it received; after local training it forms its personal model by a greedy
soup: starting from its trained local model, it adds pool models in decreasing order of their validation
accuracy whenever the uniform average of the soup with the candidate does not lower the validation
accuracy (held-out 20% of the client's data). The server averages (FedAvg) and keeps the global model.
Readings (the paper's text is not available here; this follows its published description): pool = 5,
the soup always contains the local model, interpolation starts in the first round."""
from dataclasses import dataclass

from fedlib.aggregate import weighted_average
from fedlib.methods.base import POSITIVE, Hyper, Method, hyper
from fedlib.methods.registry import register
from fedlib.metrics import accuracy, confusion


@dataclass
class SoupHyper(Hyper):
    pool: int = hyper(5, POSITIVE)


def validation_accuracy(ctx, params) -> float:
    pred = ctx.validation(params).logits.argmax(1)
    return accuracy(confusion(ctx.validation_labels, pred, ctx.num_classes))


def greedy_soup(ctx, local: dict, pool: list[dict]) -> tuple[dict, int]:
    """The local model plus every pool model (best validation accuracy first) that does not lower the
    soup's validation accuracy; returns the uniform average and the number of ingredients."""
    ingredients = [local]
    best = validation_accuracy(ctx, local)
    for candidate in sorted(pool, key=lambda p: -validation_accuracy(ctx, p)):
        trial = weighted_average(ingredients + [candidate], [1.0] * (len(ingredients) + 1))
        score = validation_accuracy(ctx, trial)
        if score >= best:
            ingredients.append(candidate)
            best = score
    return weighted_average(list(ingredients), [1.0] * len(ingredients)), len(ingredients)


@register("fedsoup", "FedSoup", "Chen, Jiang, Dou, Wang & Li, MICCAI 2023", cite="chen2023fedsoup")
class FedSoup(Method):
    Hyper = SoupHyper
    personalized = True
    validation_fraction = 0.2

    def allocation(self, num_classes, feature_dim, num_clients, model_bytes):
        """Every client keeps ``pool`` models."""
        return {"pool": num_clients * self.hp.pool * model_bytes}

    def receive(self, ctx):
        models = super().receive(ctx)
        ctx.state["pool"] = (ctx.state.get("pool", []) + [models["local"]])[-self.hp.pool:]
        return models

    def upload(self, ctx, models, result):
        ctx.state["personal"], ctx.state["soup_size"] = greedy_soup(ctx, models["local"], ctx.state["pool"])
        return super().upload(ctx, models, result)

    def eval_params(self, ctx):
        return ctx.state.get("personal", self.received_model(ctx))

    def describes_eval_params(self):
        return "each client's own model soup"
