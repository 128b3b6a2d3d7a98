"""Objects the round loop hands to methods: clients, server, phases, batches, contexts."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

import numpy as np
import torch

from fedlib.models import PARTS


class Batch(NamedTuple):
    x: torch.Tensor
    y: torch.Tensor


class Out(NamedTuple):
    z: torch.Tensor       # features (projector output): the prototype space
    logits: torch.Tensor


@dataclass
class Phase:
    """One stretch of local training: which parts train, for how many epochs, on which model.

    target "local": the model that starts from the broadcast and is uploaded;
    target "personal": a private model kept on the client (Ditto).
    """
    trainable: tuple[str, ...] = PARTS
    epochs: int | None = None          # None: the experiment's local_epochs
    loss: Callable | None = None       # None: method.local_loss
    target: str = "local"
    lr: float | None = None            # None: the experiment's lr
    optimizer: str | None = None       # None: the experiment's optimizer; "sgd" for a method's own plain steps
    max_steps: int | None = None       # stop after this many mini-batches (Per-FedAvg's one-step adaptation)
    # step(model, batch, live_params, ctx) -> loss: fills .grad itself (bi-level methods: pFedMe,
    # Per-FedAvg); None: backward of the loss
    step: Callable | None = None


@dataclass
class Client:
    id: int
    size: int
    counts: torch.Tensor               # (K,) training samples per class
    state: dict = field(default_factory=dict)  # method-owned: "params" (the local model) and extras

    @property
    def params(self) -> dict[str, torch.Tensor]:
        return self.state["params"]


@dataclass
class Server:
    state: dict = field(default_factory=dict)  # method-owned: "global" params, prototypes, ...


@dataclass
class Context:
    """What a client knows during one local update; passed to every local hook and loss."""
    client: Client
    round: int
    num_classes: int
    received: dict                     # the method's broadcast for this client
    model_fn: Callable[[dict, torch.Tensor], Out]  # functional forward with any parameter dict
    lr: float
    train_idx: torch.Tensor | None = None  # the client's sample indices into the training tensors
    steps: int = 0                     # optimizer steps taken so far this round
    extras: dict[str, Any] = field(default_factory=dict)


def derived_seed(*keys: int) -> int:
    """A 63-bit seed from (seed, round, client, ...): runs resume without saved RNG state."""
    return int(np.random.SeedSequence([int(k) for k in keys]).generate_state(2, np.uint64)[0] >> np.uint64(1))


def clone(params: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in params.items()}
