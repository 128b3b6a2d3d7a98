"""Evaluation: one pass gives per-class confusion counts of {global model, each client's model} x
{balanced global test set, client-local test sets}; metric sets turn them into record entries.

Families of confusion counts (each a list of (K, K) arrays):
  personal_local   client i's model on client i's local test set (the global model for methods
                   without personal models)
  personal_global  client i's model on the global test set
  global_global    the global model on the global test set (one array)
  global_local     the global model on every client's local test set
  personal_own     client i's model on a share of the test images of its own classes only (the
                   official FedPRP protocol: each class's test images split over the clients holding it)
A metric set names the families it needs and maps them to scalars. Methods add sets with the class
attribute ``metric_sets``, experiments with the config field ``metrics``; a paper's own sets are registered
with ``register_metric_set`` by its method's module (FedPRP's a_glo / a_loc / a_sel, pFedCSPC's HM), so a new
paper adds its metrics without a change to the engine.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from fedlib.engine.client import ADAPT_SALT, Adaptation, ClientTask
from fedlib.engine.core import ClientContext, derived_seed
from fedlib.errors import ConfigError
from fedlib.metrics import accuracy, confusion, macro_f1, summarize

FAMILIES = ("personal_local", "personal_global", "personal_own", "global_global", "global_local")


@dataclass(frozen=True)
class Evaluation:
    """The confusion counts of one evaluation and the facts metric sets may need."""
    confusions: dict[str, list[np.ndarray]]
    train_counts: np.ndarray           # clients x classes

    def get(self, family: str) -> list[np.ndarray] | None:
        return self.confusions.get(family)

    def require(self, family: str) -> list[np.ndarray]:
        return self.confusions[family]


@dataclass(frozen=True)
class MetricSet:
    name: str
    needs: frozenset
    compute: Callable[[Evaluation], dict]
    doc: str = ""


METRIC_SETS: dict[str, MetricSet] = {}


def register_metric_set(name: str, needs, compute: Callable[[Evaluation], dict], doc: str = "") -> MetricSet:
    unknown = set(needs) - set(FAMILIES)
    if unknown:
        raise ConfigError("needs", sorted(unknown), f"families among {', '.join(FAMILIES)}")
    METRIC_SETS[name] = MetricSet(name, frozenset(needs), compute, doc)
    return METRIC_SETS[name]


def prefixed(prefix: str, values: dict) -> dict:
    return {f"{prefix}_{k}": v for k, v in values.items()}


def _standard(ev: Evaluation) -> dict:
    out = {}
    local = ev.get("personal_local")
    if local is not None:
        out.update(prefixed("personal_local", summarize(local)))
        out["personal_local_acc_clients"] = [accuracy(C) for C in local]
    if (global_global := ev.get("global_global")) is not None:
        C = global_global[0]
        out.update({"global_acc": accuracy(C), "global_f1": macro_f1(C)})
        out.update(prefixed("global_local", summarize(ev.require("global_local"))))
    return out


def _personal_global(ev: Evaluation) -> dict:
    confs = ev.get("personal_global")
    return prefixed("personal_global", summarize(confs)) if confs else {}


register_metric_set("standard", ("personal_local", "global_global", "global_local"), _standard,
                    "personal_local_{acc,f1,i_local,...}, global_acc, global_f1, global_local_*")
register_metric_set("personal_global", ("personal_global",), _personal_global,
                    "personal_global_*: client models on the balanced global test set")


def resolve_metric_sets(names) -> list[MetricSet]:
    out = []
    for name in names:
        if name not in METRIC_SETS:
            raise ConfigError("metrics", name, f"metric sets among {', '.join(METRIC_SETS)}")
        if METRIC_SETS[name] not in out:
            out.append(METRIC_SETS[name])
    return out


class Evaluator:
    """Computes the confusion families the metric sets need, then the metric sets.

    ``participants_only``: client models are evaluated for the clients of the last round only (FedPRP's
    A_loc / A_sel). ``average_global``: for a method without a global model, an evaluation-only one
    (the uniform average of the evaluated clients' models) gives the global families; nothing of it is
    communicated. A method's ``prediction_variants`` add families "<family>@<variant>"."""

    def __init__(self, federation, metric_sets: list[MetricSet], participants_only: bool = False,
                 average_global: bool = False, finetune_epochs: int = 0):
        self.fed = federation
        self.sets = metric_sets
        self.needs = set().union(*(s.needs for s in metric_sets))
        self.participants_only, self.average_global = participants_only, average_global
        # ``finetune_epochs`` > 0: a method without personal models or adaptation of its own is evaluated, per
        # client, after that many epochs of cross-entropy fine-tuning of the model it would use (pFedCSPC's
        # "Local" of global methods)
        self.finetune = None
        method = federation.method
        if finetune_epochs and not method.personalized and method.finetune_phase() is None:
            from fedlib.engine.core import Phase, cross_entropy_loss

            self.finetune = Phase(epochs=finetune_epochs, loss=cross_entropy_loss)

    def _outputs(self, params, test_idx: torch.Tensor):
        return self.fed.trainer.features(params, self.fed.data.data.test_x[test_idx])

    def _confusions(self, params, test_idx: torch.Tensor, ctx: ClientContext) -> dict:
        """{variant: confusion} of the model ``params`` for the default prediction (variant None) and the
        method's variants; ``predict`` sees the evaluated model as ``ctx.model``."""
        fed = self.fed
        out = self._outputs(params, test_idx)
        ctx = dataclasses.replace(ctx, model=params)
        y = fed.data.data.test_y[test_idx]
        return {v: confusion(y, fed.method.predict(out, ctx, v), fed.data.num_classes)
                for v in (None, *fed.method.prediction_variants)}

    def _family(self, conf: dict, name: str, per_model: list[dict]) -> None:
        for variant in per_model[0] if per_model else ():
            conf[name if variant is None else f"{name}@{variant}"] = [c[variant] for c in per_model]

    def evaluated_clients(self):
        fed = self.fed
        if self.participants_only and fed.last_participants:
            return [fed.clients[i] for i in fed.last_participants]
        return fed.clients

    def personal_models(self, t: int, clients) -> tuple[list[dict], list[ClientContext]]:
        """Every client's model as it would use it now (after its evaluation-time adaptation)."""
        fed, method = self.fed, self.fed.method
        tasks = [fed.task(c, t) for c in clients]
        ctxs = [fed.context(task) for task in tasks]
        params = [method.eval_params(ctx) for ctx in ctxs]
        phase = method.finetune_phase() or self.finetune
        if phase is not None:
            adapt = [ClientTask(task.client_id, t, task.received, task.state, task.model, salt=ADAPT_SALT)
                     for task in tasks]
            params = [r.model for r in fed.executor.run(Adaptation(method, phase), adapt)]
        return params, ctxs

    def __call__(self, t: int) -> tuple[dict, dict]:
        fed, method, needs = self.fed, self.fed.method, self.needs
        data = fed.data
        conf: dict[str, list] = {}
        clients = self.evaluated_clients()
        anon = fed.anonymous_context(t)
        personal = False
        params: list[dict] = []
        ctxs: list[ClientContext] = []
        if (method.personalized or self.finetune) and needs & {"personal_local", "personal_global", "personal_own"}:
            params, ctxs = self.personal_models(t, clients)
            personal = True
        gparams = method.global_params(fed.server) if method.has_global_model else None
        if gparams is None and self.average_global and personal:
            from fedlib.aggregate import weighted_average
            from fedlib.models import network_params

            gparams = weighted_average([network_params(p) for p in params], [1.0] * len(params))
        if gparams is not None and needs & {"global_global", "global_local", "personal_local", "personal_global"}:
            # the global model predicts with what anyone receives, never with a client's private state
            self._family(conf, "global_global", [self._confusions(gparams, fed.global_test, anon)])
            if needs & {"global_local", "personal_local"}:
                self._family(conf, "global_local", [
                    self._confusions(gparams, data.test_idx[c.id], anon)
                    for c in clients])
        if personal:
            if "personal_local" in needs:
                self._family(conf, "personal_local", [
                    self._confusions(p, data.test_idx[c.client_id], c)
                    for p, c in zip(params, ctxs)])
            if "personal_global" in needs:
                self._family(conf, "personal_global", [
                    self._confusions(p, fed.global_test, c) for p, c in zip(params, ctxs)])
            if "personal_own" in needs and data.own_test_idx is not None:
                self._family(conf, "personal_own", [
                    self._confusions(p, data.own_test_idx[c.client_id], c)
                    for p, c in zip(params, ctxs)])
        elif gparams is not None and method.has_global_model:  # the global model is every client's model
            for name in ("personal_local", "personal_global", "personal_own"):
                if name not in needs:
                    continue
                if name == "personal_local":
                    for key in [k for k in conf if k.startswith("global_local")]:
                        conf[key.replace("global_local", "personal_local")] = conf[key]
                elif name == "personal_global":
                    for key in [k for k in conf if k.startswith("global_global")]:
                        conf[key.replace("global_global", "personal_global")] = conf[key] * len(clients)
                elif data.own_test_idx is not None:
                    self._family(conf, "personal_own", [
                        self._confusions(gparams, data.own_test_idx[c.id], anon)
                        for c in clients])
        ev = Evaluation(conf, data.train_counts)
        record: dict = {}
        for s in self.sets:
            record.update(s.compute(ev))
        if method.prediction_variants:
            record.update(_variants(ev, method.prediction_variants))
        return record, conf


def _variants(ev: Evaluation, variants) -> dict:
    """Mean accuracy of every family under each prediction variant ("<family>_acc@<variant>")."""
    out = {}
    for key, confs in ev.confusions.items():
        if "@" in key:
            family, variant = key.split("@", 1)
            if variant in variants:
                out[f"{family}_acc@{variant}"] = float(np.mean([accuracy(C) for C in confs]))
    return out


def global_test_indices(n: int, size: int | None, seed: int, device) -> torch.Tensor:
    """The global test set: all ``n`` test samples, or a seeded subset of ``size``."""
    test = torch.arange(n, device=device)
    if size and size < n:
        g = torch.Generator().manual_seed(derived_seed(seed, 104729))
        test = test[torch.randperm(n, generator=g)[:size].to(device)]
    return test
