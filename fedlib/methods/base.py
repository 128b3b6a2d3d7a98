"""The Method base class: FedAvg behaviour by default; subclasses override only what their paper changes.

Server hooks (see a ``Server`` and client ids, never a client's state):
  init_server(server, init)          state at round 0
  broadcast(server, client_id)       what client ``client_id`` receives ({"params": ...} and extras);
                                     client_id None: what anyone would receive (global evaluation)
  aggregate(server, uploads)         the server rule; ``uploads`` maps client id -> upload
  global_params(server)              the single global model, if the method has one
Client hooks (see a ``ClientContext``: what this client knows, nothing of the server but what it was sent):
  init_client(state, init)           the method's private state of a client at round 0
  receive(ctx) -> {target: params}   the models the local phases train ("local" is uploaded and kept)
  local_phases(ctx)                  which parts train, how long, with which loss
  local_loss(out, batch, params, ctx)  the local objective on one mini-batch: pure, per-sample terms
                                     reduced with ``batch_mean`` (so executors can vmap and pad it);
                                     ``params`` are the parameters the phase trains
  upload(ctx, models, result)        what leaves the client after training; may update ``ctx.state``
  eval_params(ctx), predict(out, ctx, variant), finetune_phase()   evaluation
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import torch

from fedlib.aggregate import select, weighted_average
from fedlib.engine.core import (
    Batch,
    ClientContext,
    LocalResult,
    LossContext,
    Out,
    Phase,
    Server,
    clone,
    cross_entropy_loss,
)
from fedlib.errors import ConfigError, check_fields
from fedlib.models import PARTS
from fedlib.prototypes import aggregate_prototypes, class_stats, feature_variance


@dataclass(frozen=True)
class Bounds:
    """Where a numeric hyperparameter may lie: from ``low`` (excluded when ``low_open``) to ``high``."""
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    says: str = ""   # what the error message asks for

    def admits(self, value) -> bool:
        above = self.low is None or (value > self.low if self.low_open else value >= self.low)
        return above and (self.high is None or value <= self.high)


POSITIVE = Bounds(0, low_open=True, says="a positive number")
NON_NEGATIVE = Bounds(0, says="a non-negative number")
UNIT = Bounds(0, 1, says="a number in [0, 1]")
UNIT_POSITIVE = Bounds(0, 1, low_open=True, says="a number in (0, 1]")


def hyper(default, check: Bounds | tuple[str, ...] | None = None, *, added_later: bool = False):
    """A hyperparameter field: its default, what it admits (``Bounds``, or a tuple of the names it may be; a
    value of None, where its type allows it, is not checked), and ``added_later``: a field added after records
    were made, left out of the cache key at its default (so records made before it existed keep their keys)."""
    return dataclasses.field(default=default, metadata={"check": check, "added_later": added_later})


def added_later(default, check: Bounds | tuple[str, ...] | None = None):
    return hyper(default, check, added_later=True)


@dataclass
class Hyper:
    """Method hyperparameters: subclasses declare fields with ``hyper(default, check)``; ``validate`` holds only
    what one field's check cannot say (a relation between fields, a list's elements)."""

    def checked(self) -> None:
        """Every field against what it declares, then ``validate``."""
        for f in dataclasses.fields(self):
            check, value = f.metadata.get("check"), getattr(self, f.name)
            if check is None or value is None:
                continue
            if isinstance(check, Bounds) and not check.admits(value):
                raise ConfigError(f"hyper.{f.name}", value, check.says)
            if isinstance(check, tuple) and value not in check:
                raise ConfigError(f"hyper.{f.name}", value, f"one of {', '.join(check)}")
        self.validate()

    def validate(self) -> None:
        pass

    def keyed(self) -> dict:
        """The hyperparameters as the cache key holds them: all of them, defaults included, except a field added
        with ``added_later`` while it keeps its default."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if not (f.metadata.get("added_later") and getattr(self, f.name) == f.default)}


class Method:
    name: ClassVar[str] = "fedavg"
    label: ClassVar[str] = "FedAvg"          # how tables and figures name it (a chapter may override it)
    paper: ClassVar[str] = "McMahan et al., AISTATS 2017"
    cite: ClassVar[str | None] = "mcmahan2017fedavg"   # its paper's key in book/references.bib (None: no paper)
    Hyper: ClassVar[type] = Hyper
    shared: tuple[str, ...] = PARTS   # parts averaged by the server and broadcast (an instance may set its own)
    personalized: ClassVar[bool] = False        # evaluate each client's own model
    has_global_model: ClassVar[bool] = True     # a single global model exists (A_glo)
    metric_sets: ClassVar[tuple[str, ...]] = ()  # metric sets evaluated beside the experiment's
    prediction_variants: ClassVar[tuple[str, ...]] = ()  # other ways to predict, recorded as <metric>@<variant>
    # share of each client's training data held out as its validation set (``ClientContext.validation``);
    # the client never trains on it (FedFomo, FedSoup)
    validation_fraction: ClassVar[float] = 0.0
    # Bump when a change of code alters this class's results: the cache key holds the versions
    # declared along the method's class hierarchy (``Method.versions``), so only its records recompute.
    version: ClassVar[int] = 1
    # What travels (checked by the Flower engine, which refuses anything else): the keys of ``broadcast``'s
    # and ``upload``'s dicts that this class adds; a method may send any key declared along its hierarchy
    # (``Method.declared``)
    broadcast_keys: ClassVar[tuple[str, ...]] = ("params",)
    upload_keys: ClassVar[tuple[str, ...]] = ("params", "n")

    def __init__(self, **hyper):
        names = {f.name for f in dataclasses.fields(self.Hyper)}
        for key in hyper:
            if key not in names:
                raise ConfigError(f"hyper.{key}", hyper[key],
                                  f"a hyperparameter of {self.name}: {', '.join(sorted(names)) or 'none'}")
        self.hp = self.Hyper(**hyper)
        check_fields(self.hp, "hyper.")   # types first: the checks compare numbers
        self.hp.checked()

    @classmethod
    def declared(cls, kind: str) -> frozenset[str]:
        """The keys a method may send: ``kind`` "broadcast" or "upload", declared along its class hierarchy."""
        return frozenset(k for c in cls.__mro__ for k in c.__dict__.get(f"{kind}_keys", ()))

    @classmethod
    def sums_uploads(cls) -> bool:
        """Whether the server needs only the sum of the uploads: its rule is FedAvg's sample-weighted mean of the
        shared parts (``Method.aggregate``) and nothing else is uploaded. Secure aggregation (SecAgg+ on
        Flower), which shows the server only that sum, can serve exactly these methods."""
        return bool(cls.shared) and cls.aggregate is Method.aggregate and cls.declared("upload") == {"params", "n"}

    @classmethod
    def versions(cls) -> dict[str, int]:
        """The ``version`` each class of the hierarchy declares (the cache key's method part)."""
        return {k.__name__: k.__dict__["version"] for k in cls.__mro__ if "version" in k.__dict__}

    # ------------------------------------------------------------------ server side
    def init_server(self, server: Server, init: dict[str, torch.Tensor]) -> None:
        server.state["global"] = clone(init)   # shared parts are averaged into it; the rest stays at init

    def broadcast(self, server: Server, client_id: int | None) -> dict:
        return {"params": select(server.state["global"], self.shared)} if self.shared else {}

    def aggregate(self, server: Server, uploads: dict[int, dict]) -> None:
        if self.shared:
            ups = list(uploads.values())
            server.state["global"] = {**server.state["global"],
                                      **weighted_average([u["params"] for u in ups], [u["n"] for u in ups])}

    def global_params(self, server: Server) -> dict[str, torch.Tensor] | None:
        return server.state["global"] if self.has_global_model else None

    def round_log(self, server: Server) -> dict:
        """Small per-round facts for the result record: the aggregation weights a method stored
        in ``server.state["weights"]`` (FedPAC, FedGPA), rounded."""
        w = server.state.get("weights")
        return {} if w is None else {"weights": {k: np.asarray(v).round(5).tolist() for k, v in w.items()}}

    # ------------------------------------------------------------------ client side
    def init_client(self, state: dict, init: dict[str, torch.Tensor]) -> None:
        pass

    def received_model(self, ctx: ClientContext) -> dict[str, torch.Tensor]:
        """The client's own model with what the server sent on top."""
        assert ctx.model is not None, "the client's model is not given inside the vmapped loss"
        return {**ctx.model, **ctx.received.get("params", {})}

    def receive(self, ctx: ClientContext) -> dict[str, dict]:
        return {"local": self.received_model(ctx)}

    def local_phases(self, ctx: ClientContext) -> list[Phase]:
        return [Phase()]

    def local_loss(self, out: Out, batch: Batch, params: dict, ctx: LossContext) -> torch.Tensor:
        return cross_entropy_loss(out, batch, params, ctx)

    def local_step(self, loss_fn):
        """The method's own optimizer step around ``loss_fn`` (a ``Phase.step``, e.g. FedASAM's
        sharpness-aware step), so that another method can put its objective inside it; None: plain steps."""
        return None

    def upload(self, ctx: ClientContext, models: dict, result: LocalResult) -> dict:
        return {"params": select(models["local"], self.shared), "n": ctx.size}

    def allocation(self, num_classes: int, feature_dim: int, num_clients: int,
                   model_bytes: int) -> dict[str, int]:
        """Bytes of the tensors that a size-setting hyperparameter makes ({hyperparameter: bytes}), checked
        against the device's free memory before training; default: none."""
        return {}

    # ------------------------------------------------------------------ evaluation (client side)
    def finetune_phase(self) -> Phase | None:
        """Local adaptation before each evaluation (FedAvg-FT, FedBABU, Per-FedAvg); None: none."""
        return None

    def eval_params(self, ctx: ClientContext) -> dict[str, torch.Tensor]:
        """The model the client would use now: its own, with what the server sends on top."""
        return self.received_model(ctx)

    def predict(self, out: Out, ctx: ClientContext, variant: str | None = None) -> torch.Tensor:
        """Predicted classes; ``variant`` None is the method's own rule, others are its
        ``prediction_variants``. ``ctx.client_id`` is None for the global model."""
        return out.logits.argmax(1)

    # what the protocol table says of the two hooks above (engine.evaluation.describe): a method that overrides
    # ``eval_params`` or ``predict`` says in the same class what it does (tests/test_methods_describe.py)
    def describes_eval_params(self) -> str | None:
        """The model ``eval_params`` gives a client, in words; None: the model the client has with what the
        server sends on top (the default)."""
        return None

    def describes_prediction(self) -> str:
        """The rule ``predict`` applies (variant None), in words."""
        return "the largest logit"

    def describes_adaptation(self) -> str | None:
        """What ``eval_params`` itself trains before evaluation (FedETF's local adaptation), in words; None: nothing
        (``finetune_phase`` is the engine's way to adapt, described from the phase)."""
        return None

    # ------------------------------------------------------------------ helpers for subclasses
    def embed(self, z: torch.Tensor) -> torch.Tensor:
        """The space the method's prototypes live in (FedPCL: the unit sphere); default: z itself."""
        return z

    def local_statistics(self, ctx: ClientContext, params: dict):
        """Per-class counts, prototypes (class means of embedded features) and squared-norm sums of
        the client's training data under ``params`` (no gradient)."""
        assert ctx.features is not None and ctx.labels is not None, "client statistics are computed outside the loss"
        out = ctx.features(params)
        counts, sums, sq = class_stats(self.embed(out.z), ctx.labels, ctx.num_classes)
        return counts, sums / counts.clamp_min(1).unsqueeze(1), sq


def retrain_linear_head(head: dict, x: torch.Tensor, y: torch.Tensor, epochs: int, batch: int, lr: float,
                        gen: torch.Generator) -> dict:
    """Cross-entropy training of a linear classifier {"head.weight", "head.bias"} on fixed features with plain
    SGD and a fresh permutation from ``gen`` every epoch (CReFF's and CCVR's classifier re-training)."""
    import torch.nn.functional as F

    head = {k: v.detach().clone().requires_grad_(True) for k, v in head.items()}
    opt = torch.optim.SGD(list(head.values()), lr=lr)
    for _ in range(epochs):
        order = torch.randperm(len(x), generator=gen).to(x.device)
        for start in range(0, len(x), batch):
            idx = order[start:start + batch]
            loss = F.cross_entropy(F.linear(x[idx], head["head.weight"], head["head.bias"]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return {k: v.detach() for k, v in head.items()}


class TrainedModelIsPersonal(Method):
    """Mixin: a client's model after its last local training is its personal model; before any training,
    what it would receive (FedALA, GRACE, pFedCSPC)."""

    personalized = True

    @staticmethod
    def mark_trained(ctx: ClientContext) -> None:
        ctx.state["trained"] = True

    @staticmethod
    def trained(ctx: ClientContext) -> bool:
        return bool(ctx.state.get("trained"))

    def upload(self, ctx, models, result):
        self.mark_trained(ctx)
        return super().upload(ctx, models, result)

    def eval_params(self, ctx):
        return ctx.model if self.trained(ctx) else self.received_model(ctx)

    def describes_eval_params(self):
        return "each client's model after its last local training"


# mixins combine with a Method subclass; to the type checker they are Methods (their super() calls resolve)
if TYPE_CHECKING:
    _MixinBase = Method
else:
    _MixinBase = object


class PersonalModel(_MixinBase):
    """Mixin: the client keeps a personal model v_i in its state beside the model it uploads (Ditto,
    pFedMe). ``receive`` offers it as the phase target "personal", starting from the initial model
    w^0 (Ditto's Algorithm 1: v_k^0 = w^0; ``ctx.model`` is w^0 until the client first trains);
    evaluation uses it (the received model before the client first trained)."""
    personalized = True

    def receive(self, ctx):
        models = super().receive(ctx)
        models["personal"] = ctx.state.get("personal", ctx.model)
        return models

    def upload(self, ctx, models, result):
        ctx.state["personal"] = models["personal"]
        return super().upload(ctx, models, result)

    def eval_params(self, ctx):
        return ctx.state.get("personal", super().eval_params(ctx))

    def describes_eval_params(self):
        return "each client's personal model v (trained beside the one it uploads)"


class PerClientAggregation(_MixinBase):
    """Mixin: the server keeps model parts per client (``server.state["personal"][i]``, e.g. FedPAC's
    heads, FedGPA's whole models) and sends them on top of the shared parts."""

    def init_server(self, server, init):
        super().init_server(server, init)
        server.state["personal"] = {}

    def broadcast(self, server, client_id):
        msg = super().broadcast(server, client_id)
        return {**msg, "params": {**msg.get("params", {}), **server.state["personal"].get(client_id, {})}}

    def store_personal(self, server, client_ids, params_list) -> None:
        for i, params in zip(client_ids, params_list):
            server.state["personal"][i] = params


class GlobalPrototypes(Method):
    """Mixin: the server keeps global prototypes (and which classes have one) and sends them with the model."""
    broadcast_keys: ClassVar[tuple[str, ...]] = ("protos", "present")

    def init_server(self, server, init):
        super().init_server(server, init)
        server.state["protos"], server.state["present"] = None, None

    def broadcast(self, server, client_id):
        return {**super().broadcast(server, client_id), "protos": server.state["protos"],
                "present": server.state["present"]}


class PrototypeSharing(GlobalPrototypes):
    """Shared by prototype methods: upload local prototypes, keep count-weighted global ones."""

    upload_variance: ClassVar[bool] = False  # also upload the within-client feature variance (FedPAC, FedGPA)
    upload_keys: ClassVar[tuple[str, ...]] = ("protos", "counts", "variance")

    def upload(self, ctx, models, result):
        counts, protos, sq = self.local_statistics(ctx, models["local"])
        # class counts are metadata (integers), not communicated parameters
        up = {**super().upload(ctx, models, result), "counts": counts.long(), "protos": protos}
        if self.upload_variance:
            up["variance"] = feature_variance(counts, sq, protos)
        return up

    def prototype_weights(self, counts: torch.Tensor) -> torch.Tensor:
        """Each client's weight in the global prototype of each class, (m, K): its class counts."""
        return counts

    def aggregate(self, server, uploads):
        super().aggregate(server, uploads)
        ups = list(uploads.values())
        server.state["protos"], server.state["present"] = aggregate_prototypes(
            torch.stack([u["protos"] for u in ups]), self.prototype_weights(torch.stack([u["counts"] for u in ups])))
