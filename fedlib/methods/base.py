"""The Method base class: FedAvg behaviour by default; subclasses override only what their paper changes.

Hooks, in the order the round loop calls them:
  init_server / init_client   state at round 0
  broadcast(server, client)   what a client receives ({"params": ...} and extras)
  local_phases(ctx)           which parts train, how long, with which loss
  local_loss(out, batch, params, ctx)   the local objective on one mini-batch (pure)
  upload(ctx, params, client, executor) what leaves the client after training
  aggregate(server, uploads, clients)   the server rule
  eval_params / global_params / predict  evaluation
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from fedlib.aggregate import select, weighted_average
from fedlib.engine.core import Batch, Client, Context, Out, Phase, Server, clone
from fedlib.errors import ConfigError
from fedlib.models import PARTS
from fedlib.prototypes import aggregate_prototypes, class_stats, feature_variance


@dataclass
class Hyper:
    """Method hyperparameters; subclasses add fields with defaults and check them in validate()."""

    def validate(self) -> None:
        pass


class Method:
    name: ClassVar[str] = "fedavg"
    paper: ClassVar[str] = "McMahan et al., AISTATS 2017"
    Hyper: ClassVar[type] = Hyper
    shared: ClassVar[tuple[str, ...]] = PARTS   # parts averaged by the server and broadcast
    personalized: ClassVar[bool] = False        # evaluate each client's own model
    has_global_model: ClassVar[bool] = True     # a single global model exists (A_glo)

    def __init__(self, **hyper):
        names = {f.name for f in dataclasses.fields(self.Hyper)}
        for key in hyper:
            if key not in names:
                raise ConfigError(f"hyper.{key}", hyper[key],
                                  f"a hyperparameter of {self.name}: {', '.join(sorted(names)) or 'none'}")
        self.hp = self.Hyper(**hyper)
        self.hp.validate()

    # ------------------------------------------------------------------ state
    def init_server(self, server: Server, init: dict[str, torch.Tensor], clients: list[Client]) -> None:
        server.state["global"] = select(clone(init), self.shared)

    def init_client(self, client: Client, init: dict[str, torch.Tensor]) -> None:
        client.state["params"] = clone(init)

    # ------------------------------------------------------------------ round
    def broadcast(self, server: Server, client: Client) -> dict:
        return {"params": server.state["global"]} if self.shared else {}

    def local_phases(self, ctx: Context) -> list[Phase]:
        return [Phase()]

    def local_loss(self, out: Out, batch: Batch, params: dict, ctx: Context) -> torch.Tensor:
        return cross_entropy(out, batch, params, ctx)

    def upload(self, ctx: Context, params: dict, client: Client, executor) -> dict:
        return {"params": select(params, self.shared), "n": client.size}

    def aggregate(self, server: Server, uploads: dict[int, dict], clients: list[Client]) -> None:
        if self.shared:
            ups = list(uploads.values())
            server.state["global"] = weighted_average([u["params"] for u in ups], [u["n"] for u in ups])

    # ------------------------------------------------------------------ evaluation
    def finetune_phase(self) -> Phase | None:
        """Local adaptation before each evaluation (FedAvg-FT, FedBABU, Per-FedAvg); None: none."""
        return None

    def eval_params(self, server: Server, client: Client) -> dict[str, torch.Tensor]:
        """The model client ``client`` would use now: its own, with what the server sends on top."""
        return {**client.params, **self.broadcast(server, client).get("params", {})}

    def global_params(self, server: Server, clients: list[Client]) -> dict[str, torch.Tensor] | None:
        if not self.has_global_model:
            return None
        return {**clients[0].params, **server.state["global"]}

    def predict(self, out: Out, server: Server, client: Client | None) -> torch.Tensor:
        return out.logits.argmax(1)

    def round_log(self, server: Server) -> dict:
        """Small per-round facts for the result record: the aggregation weights a method stored
        in ``server.state["weights"]`` (FedPAC, FedGPA), rounded."""
        w = server.state.get("weights")
        return {} if w is None else {"weights": {k: np.asarray(v).round(5).tolist() for k, v in w.items()}}

    # ------------------------------------------------------------------ helpers for subclasses
    def embed(self, z: torch.Tensor) -> torch.Tensor:
        """The space the method's prototypes live in (FedPCL: the unit sphere); default: z itself."""
        return z

    def local_statistics(self, executor, params: dict, ctx: Context):
        """Per-class counts, prototypes (class means of embedded features) and squared-norm sums of
        the client's training data under ``params`` (no gradient)."""
        out = executor.features(params, executor.x[ctx.train_idx])
        counts, sums, sq = class_stats(self.embed(out.z), executor.y[ctx.train_idx], ctx.num_classes)
        return counts, sums / counts.clamp_min(1).unsqueeze(1), sq


class PrototypeSharing(Method):
    """Shared by prototype methods: upload local prototypes, keep count-weighted global ones."""

    upload_variance: ClassVar[bool] = False  # also upload the within-client feature variance (FedPAC, FedGPA)

    def init_server(self, server, init, clients):
        super().init_server(server, init, clients)
        server.state["protos"], server.state["present"] = None, None

    def broadcast(self, server, client):
        return {**super().broadcast(server, client), "protos": server.state["protos"],
                "present": server.state["present"]}

    def upload(self, ctx, params, client, executor):
        counts, protos, sq = self.local_statistics(executor, params, ctx)
        # class counts are metadata (integers), not communicated parameters
        up = {**super().upload(ctx, params, client, executor), "counts": counts.long(), "protos": protos}
        if self.upload_variance:
            up["variance"] = feature_variance(counts, sq, protos)
        return up

    def aggregate(self, server, uploads, clients):
        super().aggregate(server, uploads, clients)
        ups = list(uploads.values())
        server.state["protos"], server.state["present"] = aggregate_prototypes(
            torch.stack([u["protos"] for u in ups]), torch.stack([u["counts"] for u in ups]))


def cross_entropy(out: Out, batch: Batch, params: dict, ctx: Context) -> torch.Tensor:
    """The plain local objective, usable as a Phase loss (FedPAC's head phase, fine-tuning)."""
    return F.cross_entropy(out.logits, batch.y)


def positive(value, name: str, allow_zero: bool = False) -> None:
    ok = value >= 0 if allow_zero else value > 0
    if not ok:
        raise ConfigError(f"hyper.{name}", value, "a non-negative number" if allow_zero else "a positive number")


def unit_interval(value, name: str) -> None:
    if not 0 <= value <= 1:
        raise ConfigError(f"hyper.{name}", value, "a number in [0, 1]")
