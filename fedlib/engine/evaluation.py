"""Evaluation: one pass gives per-class confusion counts of {global model, each client's model} x
{test sets}; metric sets turn them into record entries.

A family of confusion counts is "<model>_<test set>" (each a list of (K, K) arrays):
  model     "personal": client i's model as it would use it (the global model for methods without personal
            models); "global": the global model
  test set  "global": the balanced global test set (shared: the global model gives one array on it);
            "local": client i's local test set (same label mix as its training data); more sets are
            registered with ``register_test_set`` by the module that needs them (FedPRP's "own")
A metric set names the families it needs and maps them to scalars. Methods add sets with the class
attribute ``metric_sets``, experiments with the config field ``metrics``; a paper's own sets and test sets
are registered by its method's module (FedPRP's a_glo / a_loc / a_sel and its own-class test images,
pFedCSPC's HM), so a new paper adds its metrics without a change to the engine.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from fedlib.engine.client import ADAPT_SALT, Adaptation, ClientTask
from fedlib.engine.core import ClientContext, derived_seed
from fedlib.errors import ConfigError
from fedlib.metrics import accuracy, confusion, macro_f1, summarize
from fedlib.models import part_of

if TYPE_CHECKING:
    from fedlib.data.federated import FederatedData
    from fedlib.engine.core import ClientSlot, Server
    from fedlib.engine.protocol import EvaluationPlan
    from fedlib.engine.training import Trainer


class Evaluated(Protocol):
    """The narrow view of a federation the Evaluator (and the test sets' indices) take: what it evaluates
    (the method, the server, the client slots and who trained last), with what (data, trainer, executor, the
    global test indices) and the contexts a client would see. ``Federation`` is one; a Flower node's is another."""
    method: Any
    data: FederatedData
    trainer: Trainer
    executor: Any
    server: Server
    clients: list[ClientSlot]
    last_participants: list[int]
    global_test: torch.Tensor

    def task(self, client: ClientSlot, t: int) -> ClientTask: ...

    def context(self, task: ClientTask) -> ClientContext: ...

    def anonymous_context(self, t: int, received: dict | None = None) -> ClientContext: ...

MODELS = ("personal", "global")


@dataclass(frozen=True)
class TestSet:
    """Test indices of a federation: one tensor shared by all clients, or one per client (``None``: the
    data has no such set, its families are left out)."""
    name: str
    indices: Callable[[Evaluated], torch.Tensor | list[torch.Tensor] | None]
    shared: bool = False
    description: str = ""                 # what a reader is told the test set is (protocol tables)


TEST_SETS: dict[str, TestSet] = {}


def register_test_set(name: str, indices: Callable, shared: bool = False, description: str = "") -> TestSet:
    TEST_SETS[name] = TestSet(name, indices, shared, description)
    return TEST_SETS[name]


register_test_set("global", lambda fed: fed.global_test, shared=True,
                  description="the balanced test set, the same for every client")
register_test_set("local", lambda fed: fed.data.test_idx,
                  description="each client's local test images (drawn with its own label mix or domain)")


def family_parts(family: str) -> tuple[str, str]:
    model, _, test_set = family.partition("_")
    if model not in MODELS or test_set not in TEST_SETS:
        raise ConfigError("needs", family, f"families <model>_<test set>: models {', '.join(MODELS)}, "
                                           f"test sets {', '.join(TEST_SETS)}")
    return model, test_set


@dataclass(frozen=True)
class Evaluation:
    """The confusion counts of one evaluation and the facts metric sets may need: ``outputs`` holds, per family,
    the output facts the sets asked for ({fact: one count array per model}; a Flower node sends them with its
    confusion counts)."""
    confusions: dict[str, list[np.ndarray]]
    train_counts: np.ndarray           # clients x classes
    outputs: dict[str, dict[str, list[np.ndarray]]] = dataclasses.field(default_factory=dict)

    def get(self, family: str) -> list[np.ndarray] | None:
        return self.confusions.get(family)

    def require(self, family: str) -> list[np.ndarray]:
        return self.confusions[family]

    def output_fact(self, family: str, fact: str) -> list[np.ndarray] | None:
        return self.outputs.get(family, {}).get(fact)


# Facts read off a model's outputs on a test set, beside its confusion counts: name -> counts (an array) of one
# model's ``Out``. They travel with the confusions under the key "fact:<name>" and are not confusions.
OUTPUT_FACTS: dict[str, Callable[[Any], np.ndarray]] = {}
FACT = "fact:"


def register_output_fact(name: str, count: Callable[[Any], np.ndarray]) -> None:
    OUTPUT_FACTS[name] = count


def zero_embeddings(out) -> np.ndarray:
    """[test images whose embedding z is all zeros, test images]: a projection whose ReLU units are all dead for an
    image sends it to 0, where it scores alike with every prototype."""
    z = out.z.flatten(1)
    return np.array([int((z == 0).all(1).sum()), len(z)])


register_output_fact("zero_embedding", zero_embeddings)


@dataclass(frozen=True)
class MetricSet:
    name: str
    needs: frozenset
    compute: Callable[[Evaluation], dict]
    doc: str = ""
    facts: frozenset = frozenset()   # output facts (``OUTPUT_FACTS``) read on the families it needs


METRIC_SETS: dict[str, MetricSet] = {}


def register_metric_set(name: str, needs, compute: Callable[[Evaluation], dict], doc: str = "",
                        facts=()) -> MetricSet:
    for family in needs:
        family_parts(family)
    for fact in facts:
        if fact not in OUTPUT_FACTS:
            raise ConfigError("facts", fact, f"output facts among {', '.join(OUTPUT_FACTS)}")
    METRIC_SETS[name] = MetricSet(name, frozenset(needs), compute, doc, frozenset(facts))
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


def _collapse(ev: Evaluation) -> dict:
    """Share of the clients' local test images predicted as class 0 (an argmax over equal scores picks class 0) and
    share whose embedding is all zeros (where the evaluation read it); pooled over clients."""
    local = ev.require("personal_local")
    predicted_zero, images = sum(C[:, 0].sum() for C in local), sum(C.sum() for C in local)
    out = {"personal_local_class0_share": float(predicted_zero / max(images, 1))}
    zero = ev.output_fact("personal_local", "zero_embedding")
    if zero is not None:
        out["personal_local_zero_embedding_share"] = float(sum(c[0] for c in zero) / max(sum(c[1] for c in zero), 1))
    return out


register_metric_set("collapse", ("personal_local",), _collapse,
                    "personal_local_class0_share, personal_local_zero_embedding_share: a collapsed embedding's marks",
                    facts=("zero_embedding",))


def resolve_metric_sets(names) -> list[MetricSet]:
    out = []
    for name in names:
        if name not in METRIC_SETS:
            raise ConfigError("metrics", name, f"metric sets among {', '.join(METRIC_SETS)}")
        if METRIC_SETS[name] not in out:
            out.append(METRIC_SETS[name])
    return out


def adaptation_phase(method, finetune_epochs: int = 0):
    """What a client runs on its model before it is evaluated: the method's own adaptation (FedAvg-FT, FedBABU,
    Per-FedAvg), else for a method without personal models the plan's ``finetune_epochs`` of cross-entropy on the
    whole model (pFedCSPC's "Local" of global methods), else None."""
    phase = method.finetune_phase()
    if phase is None and finetune_epochs and not method.personalized:
        from fedlib.engine.core import Phase, cross_entropy_loss

        phase = Phase(epochs=finetune_epochs, loss=cross_entropy_loss)
    return phase


def family_model(method, model: str, finetune_epochs: int = 0) -> str:
    """Which model the families of ``model`` ("personal" or "global") read under the Evaluator's rule:
    "personal" (each client's, as ``eval_params`` gives it, after ``adaptation_phase``), "global", or "average"
    (an evaluation-only average of the clients' models, for a method without a global model)."""
    if model == "personal" and (method.personalized or adaptation_phase(method, finetune_epochs) is not None):
        return "personal"
    return "global" if method.has_global_model else "average"


def describe(method, plan: EvaluationPlan, family: str, lr: float, local_epochs: int) -> dict[str, str]:
    """The Evaluator's rule for ``family`` in words, read from the same decisions (``family_model``,
    ``adaptation_phase``) and the method's own descriptions of its hooks: {"model", "before evaluation",
    "prediction"}."""
    from fedlib.models import PARTS

    model, _ = family_parts(family)
    source = family_model(method, model, plan.finetune_epochs)
    phase = adaptation_phase(method, plan.finetune_epochs) if source == "personal" else None
    if source == "personal" and method.finetune_phase() is not None:
        text = "the model it receives, fine-tuned by each client"
    elif source == "personal" and method.personalized:
        local = [part for part in PARTS if part not in method.shared]
        text = method.describes_eval_params() or "each client's own model"
        text += " (no weights sent)" if len(local) == len(PARTS) else \
            f" ({', '.join(local)} never sent)" if local else ""
    elif source == "personal":   # a method without personal models, fine-tuned by the plan from eval_params
        text = f"{method.describes_eval_params() or 'the global model'}, fine-tuned by each client"
    elif source == "global":
        text = "the global model" if model == "global" else "the global model (no personal model)"
    else:
        text = "the average of the clients' models" if plan.average_global else "none (no global model)"
    own = method.describes_adaptation() if source == "personal" else None
    if own:
        before = own
    elif phase is None:
        before = "none"
    else:
        rate = phase.lr if phase.lr is not None else lr
        epochs = phase.epochs if phase.epochs is not None else local_epochs
        span = f"{phase.max_steps} step{'s' if phase.max_steps != 1 else ''}" if phase.max_steps else \
            f"{epochs} epoch{'s' if epochs != 1 else ''}"
        parts = "the whole model" if tuple(phase.trainable) == PARTS else " + ".join(phase.trainable)
        loss = " of cross-entropy" if method.finetune_phase() is None else ""   # the plan's fine-tuning
        before = f"{span}{loss} on {parts}, lr {rate:g}"
    return {"model": text, "before evaluation": before, "prediction": method.describes_prediction()}


class Evaluator:
    """Computes the confusion families the metric sets need, then the metric sets.

    ``participants_only``: client models are evaluated for the clients of the last round only (FedPRP's
    A_loc / A_sel). ``average_global``: for a method without a global model, an evaluation-only one
    (the uniform average of the evaluated clients' models) gives the global families; nothing of it is
    communicated. A method's ``prediction_variants`` add families "<family>@<variant>"."""

    def __init__(self, federation: Evaluated, metric_sets: list[MetricSet], participants_only: bool = False,
                 average_global: bool = False, finetune_epochs: int = 0):
        self.fed = federation
        self.sets = metric_sets
        needs = set().union(*(s.needs for s in metric_sets))
        self.facts = sorted(set().union(*(s.facts for s in metric_sets)))
        # families in a fixed order: global model first (a method without personal models reuses them)
        self.families = [f"{m}_{t}" for m in ("global", "personal") for t in TEST_SETS if f"{m}_{t}" in needs]
        self.participants_only, self.average_global = participants_only, average_global
        self._test_sets: dict[str, object] = {}
        self._encoded: dict[int, tuple] = {}   # per test set: (its indices, the last body run on it, its outputs h)
        # ``finetune_epochs`` > 0: a method without personal models or adaptation of its own is evaluated, per
        # client, after that many epochs of cross-entropy fine-tuning of the model it would use (pFedCSPC's
        # "Local" of global methods)
        method = federation.method
        if average_global and method.personalized and not method.has_global_model and \
                hasattr(federation.executor, "client_confusions"):
            raise ConfigError("average_global", True, "False where clients keep their models on their own nodes "
                              "(Flower): the average would need every client's model on the server")
        self.adapt = adaptation_phase(method, finetune_epochs)   # what ``describe`` names, from the same rule
        self.finetune_epochs = finetune_epochs

    def test_indices(self, name: str):
        if name not in self._test_sets:
            self._test_sets[name] = TEST_SETS[name].indices(self.fed)
        return self._test_sets[name]

    def _outputs(self, params, test_idx: torch.Tensor):
        """The model's outputs on the test images ``test_idx``. Within one evaluation a model whose body equals one
        already run on the same images reuses its encoder outputs (clients that share the global body, on a
        shared test set: FedMate's and FedPer's 20 clients on the 10,000 global test images run one body, not
        20); bitwise what a full forward pass gives (``Trainer.features_from``)."""
        trainer = self.fed.trainer
        body = {k: v for k, v in params.items() if part_of(k) == "body"}
        seen = self._encoded.get(id(test_idx))
        if seen is not None and seen[0] is test_idx and seen[1].keys() == body.keys() and \
                all(torch.equal(seen[1][k], v) for k, v in body.items()):
            return trainer.features_from(params, seen[2])
        out = trainer.features(params, self.fed.data.data.test_x[test_idx])
        if body and out.h is not None:   # the last body per test set: bodies are shared by consecutive models
            self._encoded[id(test_idx)] = (test_idx, body, out.h)
        return out

    def _confusions(self, params, test_idx: torch.Tensor, ctx: ClientContext) -> dict:
        """{variant: confusion} of the model ``params`` for the default prediction (variant None) and the
        method's variants, and {"fact:<name>": counts} of the output facts the metric sets read; ``predict`` sees
        the evaluated model as ``ctx.model``."""
        fed = self.fed
        out = self._outputs(params, test_idx)
        ctx = dataclasses.replace(ctx, model=params)
        y = fed.data.data.test_y[test_idx]
        return {**{v: confusion(y, fed.method.predict(out, ctx, v), fed.data.num_classes)
                   for v in (None, *fed.method.prediction_variants)},
                **{FACT + name: OUTPUT_FACTS[name](out) for name in self.facts}}

    def evaluated_clients(self):
        fed = self.fed
        if self.participants_only and fed.last_participants:
            return [fed.clients[i] for i in fed.last_participants]
        return fed.clients

    def personal_models(self, t: int, tasks: list[ClientTask]) -> tuple[list[dict], list[ClientContext]]:
        """Each task's client model as the client would use it now (after its evaluation-time adaptation)."""
        fed, method = self.fed, self.fed.method
        ctxs = [fed.context(task) for task in tasks]
        params = [method.eval_params(ctx) for ctx in ctxs]
        if self.adapt is not None:
            adapt = [ClientTask(task.client_id, t, task.received, task.state, task.model, salt=ADAPT_SALT)
                     for task in tasks]
            params = [r.model for r in fed.executor.run(Adaptation(method, self.adapt), adapt)]
        return params, ctxs

    def global_model(self, personal_params: list[dict] | None):
        """The global model, or for a method without one under ``average_global`` the uniform average of
        the evaluated clients' models; ``None`` if neither."""
        method = self.fed.method
        if method.has_global_model and (params := method.global_params(self.fed.server)) is not None:
            return params
        if self.average_global and personal_params:
            from fedlib.aggregate import weighted_average
            from fedlib.models import network_params

            return weighted_average([network_params(p) for p in personal_params], [1.0] * len(personal_params))
        return None

    def wants_personal(self) -> bool:
        """Whether the client families use each client's own model (personalized or fine-tuned)."""
        return (family_model(self.fed.method, "personal", self.finetune_epochs) == "personal"
                and any(f.startswith("personal_") for f in self.families))

    def plan(self, has_global: bool, shared_global: bool) -> dict[str, tuple[str, str]]:
        """How each family is computed: {family: (where, model)} with where "server" (the global model on a
        shared test set), "clients" (on each client: its own model, or the global model on its own test set)
        or "same" (a personal family that repeats the global one: the method has no personal models)."""
        plan: dict[str, tuple[str, str]] = {}
        personal = self.wants_personal()
        for family in self.families:
            model, test_set = family_parts(family)
            if self.test_indices(test_set) is None:
                continue
            shared = TEST_SETS[test_set].shared
            if model == "personal" and personal:
                plan[family] = ("clients", "personal")
            elif not has_global or (model == "personal" and not shared_global):
                continue
            elif model == "personal" and f"global_{test_set}" in plan:
                plan[family] = ("same", "global")
            elif shared:
                plan[family] = ("server", "global")
            else:
                plan[family] = ("clients", "global")
        return plan

    def client_confusions(self, t: int, tasks: list[ClientTask], jobs: dict[str, str], gparams,
                          anon: ClientContext, personal=None) -> dict[str, list[dict]]:
        """{family: [per task {variant: confusion}]} for the client families ``jobs`` ({family: model}): what
        runs where a client's model and test set are (this process, or the client's Flower node).
        ``personal``: ``personal_models`` of the tasks when already computed."""
        self._encoded = {}   # encoder outputs are reused within one evaluation only
        if personal is None and "personal" in jobs.values():
            personal = self.personal_models(t, tasks)
        out: dict[str, list[dict]] = {}
        for family, model in jobs.items():
            indices = self.test_indices(family_parts(family)[1])
            shared = TEST_SETS[family_parts(family)[1]].shared
            if model == "personal":
                assert personal is not None
                out[family] = [self._confusions(p, indices if shared else indices[c.client_id], c)
                               for p, c in zip(*personal)]
            else:
                out[family] = [self._confusions(gparams, indices[task.client_id], anon) for task in tasks]
        return out

    def __call__(self, t: int) -> tuple[dict, dict]:
        fed, method = self.fed, self.fed.method
        self._encoded = {}
        clients = self.evaluated_clients()
        anon = fed.anonymous_context(t)
        personal_wanted = self.wants_personal()
        # a client model is evaluated with what the server would send it now; the global model needs only ids
        tasks = [fed.task(c, t) if personal_wanted else ClientTask(c.id, t, {}, {}, {}) for c in clients]
        # where clients' models and test sets live elsewhere (a node-local Flower deployment), the executor
        # computes the client families there and returns only confusion counts
        remote = getattr(fed.executor, "client_confusions", None)
        personal = None
        if self.average_global and personal_wanted and not method.has_global_model:
            personal = self.personal_models(t, tasks)   # in this process (refused in __init__ where clients are not)
        gparams = self.global_model(personal[0] if personal else None)
        plan = self.plan(gparams is not None, gparams is not None and method.has_global_model)
        jobs = {family: model for family, (where, model) in plan.items() if where == "clients"}
        per_family: dict[str, list[dict]] = {}
        if jobs:
            if remote is not None:
                per_family.update(remote(t, tasks, jobs, gparams, anon))
                reached = [k for k in range(len(tasks)) if all(per_family[f][k] is not None for f in jobs)]
                if len(reached) < len(tasks):   # a lost Flower node's clients (node_loss="continue"): left out
                    clients = [clients[k] for k in reached]
                    per_family = {f: [v[k] for k in reached] for f, v in per_family.items()}
            else:
                per_family.update(self.client_confusions(t, tasks, jobs, gparams, anon, personal))
        for family, (where, _) in plan.items():   # in family order: global ones before the personal copies
            test_set = family_parts(family)[1]
            if where == "server":
                one = self._confusions(gparams, self.test_indices(test_set), anon)
                per_family[family] = [one] if family.startswith("global_") else [one] * len(clients)
            elif where == "same":
                same = per_family[f"global_{test_set}"]
                per_family[family] = same * len(clients) if TEST_SETS[test_set].shared else same
        conf: dict[str, list] = {}
        outputs: dict[str, dict[str, list]] = {}
        for family in plan:
            per_model = per_family[family]
            for variant in per_model[0] if per_model else ():
                values = [c[variant] for c in per_model]
                if isinstance(variant, str) and variant.startswith(FACT):
                    outputs.setdefault(family, {})[variant[len(FACT):]] = values
                else:
                    conf[family if variant is None else f"{family}@{variant}"] = values
        ev = Evaluation(conf, fed.data.train_counts, outputs)
        record: dict = {}
        for s in self.sets:
            record.update(s.compute(ev))
        if method.prediction_variants:
            record.update(_variants(ev, method.prediction_variants))
        self._encoded = {}   # nothing of this evaluation's models is held until the next
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
    """The global test set: all ``n`` test samples, or a seeded subset of ``size`` (at most ``n``)."""
    if size is not None and size > n:
        raise ConfigError("global_test_size", size, f"at most the {n} test samples of the dataset, or None for all")
    test = torch.arange(n, device=device)
    if size and size < n:
        g = torch.Generator().manual_seed(derived_seed(seed, 104729))
        test = test[torch.randperm(n, generator=g)[:size].to(device)]
    return test
