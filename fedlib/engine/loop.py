"""The one round loop. Every method runs through ``Federation.run``.

Per round: the participation picks clients -> the server's broadcast to each -> ONE executor call runs the
client side of the whole cohort (receive, local phases, upload) -> the server aggregates -> evaluation when
the evaluation plan says -> checkpoint. What a paper's protocol sets comes in as objects
(``fedlib.engine.protocol``: LocalTraining, Participation, EvaluationPlan).
"""
from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from fedlib import serial
from fedlib.data.federated import FederatedData
from fedlib.engine.client import ClientTask, Setup
from fedlib.engine.core import VALIDATION_SALT, Batch, ClientContext, ClientSlot, Server, clone, derived_seed, own_copy
from fedlib.engine.evaluation import Evaluator, global_test_indices, resolve_metric_sets
from fedlib.engine.executors import make_executor
from fedlib.engine.protocol import EvaluationPlan, LocalTraining, Participation, UniformParticipation
from fedlib.engine.training import OptimizerSpec, Trainer
from fedlib.errors import StorageFailed, TrainingDiverged
from fedlib.models import SplitModel
from fedlib.store import atomic_save, save_tree, set_aside


def validation_split(train_idx, fraction: float, seed: int) -> tuple[tuple, tuple | None]:
    """Each client's indices split into (training, validation): a seeded ``fraction`` of them (at least
    one sample, and at least one left to train on) is held out. ``fraction`` 0: no split."""
    if not fraction:
        return tuple(train_idx), None
    train, val = [], []
    for i, idx in enumerate(train_idx):
        gen = torch.Generator().manual_seed(derived_seed(seed, VALIDATION_SALT, i))
        order = idx[torch.randperm(len(idx), generator=gen).to(idx.device)]
        n_val = min(max(1, round(fraction * len(idx))), len(idx) - 1)
        train.append(order[n_val:].sort().values)
        val.append(order[:n_val].sort().values)
    return tuple(train), tuple(val)


def count_scalars(obj) -> int:
    """Number of communicated scalars in an upload (floating tensors nested in dicts/lists)."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() if obj.is_floating_point() else 0
    if isinstance(obj, dict):
        return sum(count_scalars(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(count_scalars(v) for v in obj)
    return 0


class Federation:
    """Owns the client slots, the server, the executor and the evaluator; runs rounds, checkpoints."""

    def __init__(self, fed: FederatedData, model: SplitModel, method, *, seed: int, rounds: int,
                 training: LocalTraining, participation: Participation | None = None,
                 evaluation: EvaluationPlan | None = None, executor: str = "sequential",
                 executor_options: dict | None = None, checkpoint: str | os.PathLike | None = None,
                 progress: bool = True, desc: str = ""):
        self.data, self.method, self.seed, self.rounds = fed, method, seed, rounds
        self.training = training
        self.participation = participation or UniformParticipation()
        self.evaluation = plan = evaluation or EvaluationPlan()
        self.checkpoint = Path(checkpoint) if checkpoint else None
        self.progress, self.desc = progress, desc
        data = fed.data
        self.trainer = Trainer(model, data.train_x, data.train_y, training.batch_size,
                               OptimizerSpec(training.optimizer, training.momentum, training.weight_decay),
                               drop_last=training.drop_last, precision=training.precision)
        train_idx, val_idx = validation_split(fed.train_idx, method.validation_fraction, seed)
        self.setup = Setup(seed=seed, rounds=rounds, num_classes=fed.num_classes, lr=training.lr,
                           local_epochs=training.epochs, batch_size=training.batch_size, train_idx=train_idx,
                           train_y=data.train_y,
                           counts=tuple(torch.bincount(data.train_y[idx], minlength=fed.num_classes).float()
                                        for idx in train_idx), val_idx=val_idx)
        self.executor = make_executor(executor, self.setup, self.trainer, **(executor_options or {}))
        self.global_test = global_test_indices(len(data.test_y), plan.global_test_size, seed, data.test_y.device)
        init = clone(model.state_dict())
        self.clients = [ClientSlot(i, int(len(idx)), self.setup.counts[i], clone(init))
                        for i, idx in enumerate(train_idx)]
        for c in self.clients:
            method.init_client(c.state, init)
        held = None if fed.server_idx is None else Batch(self.trainer.x[fed.server_idx], data.train_y[fed.server_idx])
        self.server = Server(num_clients=fed.num_clients, num_classes=fed.num_classes, forward=self.trainer.forward,
                             forward_from=self.trainer.forward_from, data=held, seed=seed)
        method.init_server(self.server, init)
        self.evaluator = Evaluator(self, resolve_metric_sets([*plan.metrics, *method.metric_sets]),
                                   participants_only=plan.participants_only, average_global=plan.average_global,
                                   finetune_epochs=plan.finetune_epochs)
        self.last_participants: list[int] = []
        self.history: list[dict] = []
        self.start_round = 0
        self.elapsed = 0.0
        self.final_confusions: dict = {}
        self.on_round: list[Callable] = []  # callbacks(federation, round) e.g. to record weights
        self._client_files: dict[int, str] = {}   # checkpoint shard of each client's slot
        self._changed: set[int] = set()           # clients whose slot changed since the last checkpoint
        # seconds between checkpoints (0: after every round); run-batched grids write less often, and at their end
        self.checkpoint_every_s = 0.0
        self._saved_at, self._saved_round = -float("inf"), 0

    # ------------------------------------------------------------------ contexts
    def task(self, client: ClientSlot, t: int) -> ClientTask:
        return ClientTask(client.id, t, self.method.broadcast(self.server, client.id), client.state, client.model)

    def context(self, task: ClientTask) -> ClientContext:
        """A client's context in this process (evaluation, tests)."""
        return self.setup.context(task, self.trainer)

    def anonymous_context(self, t: int, received: dict | None = None) -> ClientContext:
        """The context the global model is evaluated in: no client, what the server sends anyone (``received``:
        that message as a node got it)."""
        if received is None:
            received = self.method.broadcast(self.server, None)
        return ClientContext(client_id=None, round=t, rounds=self.rounds, seed=derived_seed(self.seed, t, 2 ** 31),
                             num_classes=self.data.num_classes, lr=self.setup.lr,
                             received=own_copy(received), state={}, model=None,
                             counts=None, size=None, labels=None, forward=self.trainer.forward)

    # ------------------------------------------------------------------ one round
    def open_round(self, t: int) -> list[ClientTask]:
        """Sample the round's clients and build each one's task (what the server sends it)."""
        self.server.round = t
        chosen = self.participation.clients(self.data.num_clients, self.seed, t)
        self.last_participants = chosen
        self._changed.update(chosen)   # their slots are rewritten at the next checkpoint
        return [self.task(self.clients[i], t) for i in chosen]

    def close_round(self, results: list) -> dict:
        """Keep the clients' new models and states, aggregate their uploads; the round's training facts."""
        for r in results:
            slot = self.clients[r.client_id]
            slot.model, slot.state = r.model, r.state
        uploads = {r.client_id: r.upload for r in results}
        self.method.aggregate(self.server, uploads)
        self.check_server_finite()
        losses = [loss for r in results for loss in r.result.phase_losses]
        return {"train_loss": float(np.mean(losses)) if losses else float("nan"),
                "uploaded_per_client": count_scalars(list(uploads.values())) / max(len(uploads), 1)}

    def check_server_finite(self) -> None:
        """Server-side divergence (a server rule's own optimizer or step size) stops the run like a client's:
        every floating tensor of the server's state must be finite after aggregation (one device sync)."""
        found: list[tuple[str, torch.Tensor]] = []

        def walk(obj, name):
            if isinstance(obj, torch.Tensor) and obj.is_floating_point():
                found.append((name, obj))
            elif isinstance(obj, dict):
                for k, v in obj.items():
                    walk(v, f"{name}.{k}" if name else str(k))
            elif isinstance(obj, (list, tuple)):
                for i, v in enumerate(obj):
                    walk(v, f"{name}[{i}]")

        walk(self.server.state, "")
        if not found:
            return
        finite = torch.stack([torch.isfinite(t).all().to(found[0][1].device) for _, t in found]).cpu()
        if not bool(finite.all()):
            name = found[int((~finite).nonzero()[0])][0]
            hyper = {f.name: getattr(self.method.hp, f.name) for f in dataclasses.fields(self.method.hp)}
            raise TrainingDiverged(
                f"the server's {name} became non-finite in round {self.server.round + 1} ({self.method.name}'s "
                f"aggregation): lower the hyperparameters of its server rule (hyper {hyper}) or the learning rate")

    def run_round(self, t: int) -> dict:
        return self.close_round(self.executor.run(self.method, self.open_round(t)))

    def evaluate(self, t: int) -> dict:
        record, self.final_confusions = self.evaluator(t)
        return record

    def end_round(self, t: int, trained: dict, started: float) -> dict:
        """After round ``t``'s training (``trained``: ``close_round``'s facts, ``started``: when the round
        began, perf_counter): evaluation when due, callbacks, the history row, the checkpoint."""
        row = {"round": t + 1, **trained, **self.method.round_log(self.server)}
        if self.evaluation.due(t, self.rounds):
            row.update(self.evaluate(t))
        for callback in self.on_round:
            callback(self, t)
        self.elapsed += time.perf_counter() - started
        row["elapsed_s"] = self.elapsed
        self.history.append(row)
        if time.perf_counter() - self._saved_at >= self.checkpoint_every_s:
            self._save(t + 1)
        return row

    def flush(self, done: int) -> None:
        """Write the checkpoint of ``done`` finished rounds if the last one written is older."""
        if self._saved_round != done:
            self._save(done)

    # ------------------------------------------------------------------ the loop
    def progress_bar(self, until: int | None = None):
        return tqdm(range(self.start_round, self.rounds if until is None else min(until, self.rounds)),
                    initial=self.start_round, total=self.rounds, desc=self.desc or self.method.name, leave=False,
                    **({} if self.progress else {"disable": True}))  # TQDM_DISABLE=1 still applies

    def run(self, until: int | None = None) -> list[dict]:
        """Run (or resume) the rounds up to ``until`` (default: all of them; a replay runs the first few) and
        return the history."""
        self._resume()
        bar = self.progress_bar(until)
        try:
            for t in bar:
                started = time.perf_counter()
                row = self.end_round(t, self.run_round(t), started)
                if "personal_local_acc" in row:
                    bar.set_postfix(acc=f"{row['personal_local_acc']:.3f}", loss=f"{row['train_loss']:.3f}")
        finally:
            bar.close()
            self.executor.close()
        return self.history

    # ------------------------------------------------------------------ checkpoints
    # ``<name>.ckpt`` holds the server, the history and which file holds each client's slot; the slots
    # live in ``<name>.ckpt.d/c<id>-r<round>.pt`` and are written only when they changed (the round's
    # participants), so a round with 10 of 1000 clients writes 10 small files, not 1000 models.
    def _state(self, done: int) -> dict:
        return {"round": done, "server": self.server.state, "participants": self.last_participants,
                "client_files": dict(self._client_files), "history": self.history, "elapsed": self.elapsed,
                "final_confusions": self.final_confusions, "format": 2}

    def _save(self, done: int) -> None:
        if self.checkpoint is None:
            return
        try:
            self._write_checkpoint(done)
        except OSError as exc:
            kept = (f"the checkpoint of round {self._saved_round} is kept" if self._saved_round
                    else "no round is checkpointed yet")
            raise StorageFailed(f"the checkpoint {exc.filename or self.checkpoint} could not be written after round "
                                f"{done} ({exc.strerror or exc}); the run stopped: {kept}, finished records are "
                                "untouched; free space or make the folder writable and run the same command again "
                                "to resume") from None

    def _write_checkpoint(self, done: int) -> None:
        assert self.checkpoint is not None
        shards = shard_folder(self.checkpoint)
        shards.mkdir(parents=True, exist_ok=True)
        changed = range(len(self.clients)) if not self._client_files else self._changed
        replaced = []
        for i in changed:
            name = f"c{i}-r{done}.pt"
            save_tree({"model": self.clients[i].model, "state": self.clients[i].state}, shards / name)
            if i in self._client_files and self._client_files[i] != name:
                replaced.append(self._client_files[i])
            self._client_files[i] = name
        atomic_save(self._state(done), self.checkpoint)   # from here on the new shards are the checkpoint
        for name in replaced:
            (shards / name).unlink(missing_ok=True)
        self._changed = set()
        self._saved_at, self._saved_round = time.perf_counter(), done

    def _resume(self) -> None:
        if self.checkpoint is None or not self.checkpoint.exists():
            return
        device = self.data.data.train_x.device
        try:
            state = serial.load(self.checkpoint, map_location=device)
            shards = shard_folder(self.checkpoint)
            slots = {i: serial.load(shards / name, map_location=device) for i, name in state["client_files"].items()}
            if sorted(slots) != list(range(len(self.clients))):
                raise ValueError(f"it holds {len(slots)} clients, this run has {len(self.clients)}")
        except Exception as exc:  # truncated, empty, from another fedlib version: start again
            moved = set_aside(self.checkpoint)
            set_aside(shard_folder(self.checkpoint))
            tqdm.write(f"fedlib: checkpoint {self.checkpoint} could not be read ({type(exc).__name__}: {exc}); "
                       f"moved to {moved.name}; starting from round 1")
            return
        self.start_round = self._saved_round = state["round"]
        self.server.state = state["server"]
        for i, slot in slots.items():
            self.clients[i].model, self.clients[i].state = slot["model"], slot["state"]
        self._client_files = dict(state["client_files"])
        self.history, self.elapsed = state["history"], state["elapsed"]
        self.final_confusions = state.get("final_confusions", {})
        self.last_participants = state.get("participants", [])


def shard_folder(checkpoint: Path) -> Path:
    return checkpoint.with_name(checkpoint.name + ".d")


def remove_checkpoint(checkpoint: Path) -> None:
    """Delete a finished run's checkpoint and its client shards."""
    import shutil

    checkpoint.unlink(missing_ok=True)
    shutil.rmtree(shard_folder(checkpoint), ignore_errors=True)
    shutil.rmtree(node_folder(checkpoint), ignore_errors=True)


def node_folder(checkpoint: Path) -> Path:
    """Where the clients' own nodes keep their private state in a rehearsal on one machine (Flower)."""
    return checkpoint.with_name(checkpoint.name + ".nodes")
