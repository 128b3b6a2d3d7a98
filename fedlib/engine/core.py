"""What the round loop hands to methods: batches, phases, the frozen client context, the server.

The seam between the two sides of a federation:
* server hooks (``init_server``, ``broadcast``, ``aggregate``, ``global_params``) receive a ``Server``
  and client ids, never a client's state;
* client hooks (``init_client``, ``receive``, ``local_phases``, ``local_loss``, ``upload``,
  ``eval_params``, ``predict``) receive a ``ClientContext``: what this client knows, and nothing of
  the server but what it was sent.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch

from fedlib.losses import cross_entropy
from fedlib.models import PARTS

Params = Mapping[str, torch.Tensor]


class Batch(NamedTuple):
    x: torch.Tensor
    y: torch.Tensor
    # per-sample weights (1 = a real sample, 0 = padding) when an executor pads batches to one size;
    # None: every sample counts. Losses reduce per-sample terms with ``fedlib.losses.batch_mean``.
    weight: torch.Tensor | None = None


class Out(NamedTuple):
    z: torch.Tensor       # features (projector output): the prototype space
    logits: torch.Tensor
    h: torch.Tensor | None = None   # the body's (encoder's) output, before the projector


@dataclass(frozen=True)
class Phase:
    """One stretch of local training: which parts train, for how long, on which model.

    ``target`` names the model the phase trains among those ``Method.receive`` returns: "local" (the
    model that is uploaded and kept as the client's model) or another name (Ditto's "personal").
    """
    trainable: tuple[str, ...] = PARTS
    epochs: int | None = None          # None: the experiment's local_epochs
    loss: Callable | None = None       # None: method.local_loss
    target: str = "local"
    lr: float | None = None            # None: the experiment's lr
    optimizer: str | None = None       # None: the experiment's optimizer; "sgd" for a method's own plain steps
    weight_decay: float | None = None  # None: the experiment's weight decay
    momentum: float | None = None      # None: the experiment's momentum (FedDC: 0, its updates estimate gradients)
    max_steps: int | None = None       # stop after this many mini-batches (Per-FedAvg's one-step adaptation)
    # step(batch, params, ctx) -> loss: fills ``.grad`` of ``params`` itself (bi-level methods: pFedMe,
    # Per-FedAvg). Such a phase cannot be batched across clients; executors run it client by client.
    step: Callable | None = None
    # projected gradient descent: (key, low, high) for trained tensors kept inside [low, high] after every
    # optimizer step (APFL's mixing weight alpha in [0, 1])
    bounds: tuple[tuple[str, float, float], ...] = ()

    def project(self, params: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``params`` with each bounded tensor clipped into its interval (new tensors; the rest as given)."""
        return {**params, **{k: params[k].clamp(low, high) for k, low, high in self.bounds}}


@dataclass(frozen=True)
class ClientContext:
    """What one client knows during one local update (or one evaluation). Frozen: hooks read it; a client
    hook may change only its own ``state`` dict (kept between rounds: checkpointed, sent with the client)
    and ``scratch``, this update's working space (fresh each update, never stored or sent).

    A local objective (``local_loss``, a ``Phase.loss``) sees only its ``loss_view``."""
    client_id: int | None
    round: int                         # 0-based
    rounds: int
    seed: int                          # derived from (experiment seed, round, client): use for client randomness
    num_classes: int
    lr: float
    received: Mapping[str, Any]        # what the server sent this client (``Method.broadcast``)
    state: dict                        # the method's private state of this client
    model: Params | None               # the client's model after its last local update (initial model before)
    counts: torch.Tensor | None        # (K,) training samples per class
    size: int | None                   # number of training samples
    labels: torch.Tensor | None        # the client's training labels
    forward: Callable[[Params, torch.Tensor], Out]          # functional forward; never writes buffers
    features: Callable[[Params], Out] | None = None         # eval-mode forward over the client's training data
    # a held-out share of the client's data (``Method.validation_fraction`` > 0: FedFomo, FedSoup); never trained on
    validation: Callable[[Params], Out] | None = None
    validation_labels: torch.Tensor | None = None
    batch_size: int | None = None      # the experiment's mini-batch size (methods' own loops: FedALA)
    forward_from: Callable[[Params, torch.Tensor], Out] | None = None   # projector and head on encoder outputs h
    scratch: dict = field(default_factory=dict)   # this update's working space: never checkpointed nor sent

    def loss_view(self) -> LossContext:
        return LossContext(self.round, self.rounds, self.num_classes, self.lr, self.received, self.state,
                           self.scratch, self.counts, self.forward)


@dataclass(frozen=True)
class LossContext:
    """What a local objective may read, the same under every executor: under the batched executor the loss is
    vmapped over clients and ``received``, ``state``, ``scratch`` and ``counts`` hold this client's values
    there. Whatever else a loss needs (a seed, the client's data) it prepares in ``receive`` into ``scratch``."""
    round: int                         # 0-based
    rounds: int
    num_classes: int
    lr: float
    received: Mapping[str, Any]
    state: dict
    scratch: dict
    counts: torch.Tensor | None        # (K,) training samples per class
    forward: Callable[[Params, torch.Tensor], Out]   # functional forward (a second pass: MOON, FedNTD, ...)


@dataclass
class LocalResult:
    """What the engine tells ``upload`` about the local training that just ran."""
    steps: int                         # optimizer steps on the "local" model this round
    loss: float                        # mean training loss over the round's samples (all phases)
    phase_losses: tuple[float, ...] = ()


@dataclass
class Server:
    num_clients: int
    state: dict = field(default_factory=dict)  # method-owned: "global" params, prototypes, ...
    round: int = 0
    num_classes: int = 0
    # server-side computation (CReFF, FEDIC): a functional forward of the model and, when the partition
    # holds samples out for the server ("server" > 0), that auxiliary data; never any client's data
    forward: Callable[[Params, torch.Tensor], Out] | None = None
    forward_from: Callable[[Params, torch.Tensor], Out] | None = None   # from encoder outputs h (projector, head)
    data: Batch | None = None
    seed: int = 0


@dataclass
class ClientSlot:
    """Engine-side storage of one client: its model and the method's private state. The engine
    stores both and never reads ``state``."""
    id: int
    size: int
    counts: torch.Tensor
    model: dict
    state: dict = field(default_factory=dict)


# Salts: the last or middle key of ``derived_seed`` that keeps one purpose's random stream apart from the others'.
# Participation draws (seed, round, PARTICIPATION_SALT); validation splits draw (seed, VALIDATION_SALT, client).
# Both are 7919, kept from before they had names: their positions differ, so the streams never meet, and another
# value would change every committed record's partitions of clients and rounds.
PARTICIPATION_SALT = 7919
VALIDATION_SALT = 7919


def derived_seed(*keys: int) -> int:
    """A 63-bit seed from (seed, round, client, ...): runs resume without saved RNG state."""
    return int(np.random.SeedSequence([int(k) for k in keys]).generate_state(2, np.uint64)[0] >> np.uint64(1))


def clone(params: Params) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in params.items()}


def own_copy(obj: Any) -> Any:
    """A copy of a message whose tensors share no storage with the sender's (nested dicts, lists, tuples): what
    a client receives in this process is its own, as it is when it comes through a worker process or Flower."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, dict):
        return {k: own_copy(v) for k, v in obj.items()}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):   # named tuples (Batch, Out)
        return type(obj)(*(own_copy(v) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(own_copy(v) for v in obj)
    return obj


def cross_entropy_loss(out: Out, batch: Batch, params: Params, ctx: LossContext) -> torch.Tensor:
    """The plain local objective as a Phase loss (FedPAC's head phase, fine-tuning before evaluation)."""
    return cross_entropy(out.logits, batch)
