"""The client side of a round, the same for every executor: receive -> local phases -> upload.

``begin`` and ``finish`` are split so that the batched executor can run the phases of many clients
in lockstep between them; the sequential and process executors run ``local_update`` per client.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from fedlib.engine.core import ClientContext, LocalResult, Phase, derived_seed, own_copy

ADAPT_SALT = 99   # evaluation-time adaptation draws its batches from (seed, round, client, 99 + phase)


@dataclass
class ClientTask:
    """Everything a client needs for one local update; picklable (sent to worker processes)."""
    client_id: int
    round: int
    received: dict
    state: dict
    model: dict
    salt: int = 0                      # 0: the round's update; ADAPT_SALT: evaluation-time adaptation


@dataclass
class ClientResult:
    client_id: int
    upload: dict
    model: dict                        # the trained "local" model
    state: dict                        # the method's state of this client after the update
    result: LocalResult
    models: dict = field(default_factory=dict)   # every trained model by target (adaptation reads these)


@dataclass(frozen=True)
class Setup:
    """Static facts of an experiment that client contexts are built from."""
    seed: int
    rounds: int
    num_classes: int
    lr: float
    local_epochs: int
    batch_size: int
    train_idx: tuple                   # per client: index tensor into the training tensors
    train_y: torch.Tensor
    counts: tuple                      # per client: (K,) float tensor
    val_idx: tuple | None = None       # per client: its held-out validation indices (Method.validation_fraction)

    def context(self, task: ClientTask, trainer) -> ClientContext:
        i = task.client_id
        val = None if self.val_idx is None else self.val_idx[i]
        return ClientContext(
            client_id=i,
            round=task.round,
            rounds=self.rounds,
            seed=derived_seed(self.seed, task.round, i),
            num_classes=self.num_classes,
            lr=self.lr,
            received=own_copy(task.received),   # never the server's own tensors
            state=task.state,
            model=task.model,
            counts=self.counts[i],
            size=len(self.train_idx[i]),
            labels=self.train_y[self.train_idx[i]],
            forward=trainer.forward,
            features=trainer.client_features(self.train_idx[i]),
            validation=None if val is None else trainer.client_features(val),
            validation_labels=None if val is None else self.train_y[val],
            batch_size=self.batch_size,
            forward_from=trainer.forward_from,
        )

    def phase_plan(self, phase: Phase, method) -> tuple[int, float, Any]:
        """(epochs, lr, loss function) of a phase with the experiment's defaults filled in."""
        epochs = self.local_epochs if phase.epochs is None else phase.epochs
        return epochs, phase.lr or self.lr, phase.loss or method.local_loss

    def seed_keys(self, task: ClientTask, p_idx: int) -> tuple[int, ...]:
        return (self.seed, task.round, task.client_id, task.salt + p_idx)


def begin(method, ctx: ClientContext) -> tuple[dict, list[Phase]]:
    models = dict(method.receive(ctx))
    phases = list(method.local_phases(ctx))
    for phase in phases:
        if phase.target not in models:
            raise KeyError(f"{method.name}: phase target {phase.target!r} is not among the models receive() returned "
                           f"({', '.join(models)})")
    return models, phases


def finish(method, ctx: ClientContext, models: dict, stats: list[tuple[float, int, int, str]]) -> ClientResult:
    """``stats``: per phase (loss sum, samples, steps, target)."""
    losses = tuple(s / max(n, 1) for s, n, _, _ in stats)
    seen = sum(n for _, n, _, _ in stats)
    result = LocalResult(steps=sum(k for _, _, k, target in stats if target == "local"),
                         loss=sum(s for s, _, _, _ in stats) / max(seen, 1), phase_losses=losses)
    upload = method.upload(ctx, models, result)
    assert ctx.client_id is not None, "a client's update has its id"
    return ClientResult(ctx.client_id, upload, models["local"], ctx.state, result, models)


def local_update(method, task: ClientTask, setup: Setup, trainer) -> ClientResult:
    """One client's whole update with the sequential trainer."""
    ctx = setup.context(task, trainer)
    models, phases = begin(method, ctx)
    stats = []
    for p_idx, phase in enumerate(phases):
        epochs, lr, loss_fn = setup.phase_plan(phase, method)
        models[phase.target], total, count, steps = trainer.train(
            models[phase.target], phase, loss_fn, ctx, setup.train_idx[task.client_id], epochs, lr,
            setup.seed_keys(task, p_idx))
        stats.append((total, count, steps, phase.target))
    return finish(method, ctx, models, stats)


class Adaptation:
    """A method seen through its evaluation-time adaptation (FedAvg-FT, FedBABU, Per-FedAvg): start
    from the model the client would use, run ``finetune_phase``, upload nothing, keep nothing."""

    def __init__(self, method, phase=None):
        self.method = method
        self.phase = phase or method.finetune_phase()
        self.name = f"{method.name} (adaptation)"

    def receive(self, ctx):
        return {"local": self.method.eval_params(ctx)}

    def local_phases(self, ctx):
        return [self.phase]

    def local_loss(self, out, batch, params, ctx):
        return self.method.local_loss(out, batch, params, ctx)

    def upload(self, ctx, models, result):
        return {}
