"""The one round loop. Every method runs through ``Federation.run``."""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from tqdm import tqdm

from fedlib.data.federated import FederatedData
from fedlib.engine.core import Client, Context, Server, derived_seed
from fedlib.engine.executor import SequentialExecutor
from fedlib.metrics import accuracy, confusion, macro_f1, summarize
from fedlib.models import SplitModel


def sample_clients(num_clients: int, fraction: float, seed: int, round_: int) -> list[int]:
    """Clients taking part in a round: all when fraction == 1, else max(1, round(C*m)) at random."""
    if fraction >= 1.0:
        return list(range(num_clients))
    k = max(1, int(round(fraction * num_clients)))
    rng = np.random.default_rng(derived_seed(seed, round_, 7919))
    return sorted(rng.choice(num_clients, size=k, replace=False).tolist())


def _count(obj) -> int:
    """Number of scalars in an upload (tensors nested in dicts/lists)."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() if obj.is_floating_point() else 0
    if isinstance(obj, dict):
        return sum(_count(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_count(v) for v in obj)
    return 0


class Federation:
    """Owns clients, server, executor; runs rounds, evaluates, checkpoints."""

    def __init__(self, fed: FederatedData, model: SplitModel, method, *, seed: int, rounds: int,
                 local_epochs: int, batch_size: int, lr: float, fraction: float = 1.0, eval_every: int = 1,
                 optimizer: str = "sgd", momentum: float = 0.0, weight_decay: float = 0.0,
                 eval_personal_global: bool = False, global_test_size: int | None = None,
                 checkpoint: str | os.PathLike | None = None, progress: bool = True, desc: str = ""):
        self.fed, self.method, self.seed = fed, method, seed
        self.rounds, self.local_epochs, self.lr, self.fraction = rounds, local_epochs, lr, fraction
        self.eval_every = eval_every
        self.eval_personal_global = eval_personal_global
        self.checkpoint = Path(checkpoint) if checkpoint else None
        self.progress, self.desc = progress, desc
        data = fed.data
        self.executor = SequentialExecutor(model, data.train_x, data.train_y, batch_size, optimizer, momentum,
                                           weight_decay)
        test = torch.arange(len(data.test_y), device=data.test_y.device)
        if global_test_size and global_test_size < len(test):
            g = torch.Generator().manual_seed(derived_seed(seed, 104729))
            test = test[torch.randperm(len(test), generator=g)[:global_test_size].to(test.device)]
        self.global_test = test
        self.clients = [Client(i, int(len(idx)), torch.as_tensor(fed.train_counts[i], dtype=torch.float32))
                        for i, idx in enumerate(fed.train_idx)]
        self.server = Server()
        self.history: list[dict] = []
        self.start_round = 0
        self.elapsed = 0.0
        self.final_confusions: dict = {}
        init = {k: v.detach().clone() for k, v in model.state_dict().items()}
        for c in self.clients:
            method.init_client(c, init)
        method.init_server(self.server, init, self.clients)
        self.on_round: list[Callable] = []  # callbacks(federation, round) e.g. to record weights

    # ------------------------------------------------------------------ one round
    def run_round(self, t: int) -> dict:
        method, fed = self.method, self.fed
        uploads, losses = {}, []
        for i in sample_clients(fed.num_clients, self.fraction, self.seed, t):
            client = self.clients[i]
            received = method.broadcast(self.server, client)
            params = {**client.params, **received.get("params", {})}
            ctx = Context(client, t, fed.num_classes, received, self.executor.model_fn, self.lr, fed.train_idx[i])
            for p_idx, phase in enumerate(method.local_phases(ctx)):
                epochs = self.local_epochs if phase.epochs is None else phase.epochs
                loss_fn = phase.loss or method.local_loss
                keys = (self.seed, t, i, p_idx)
                if phase.target == "personal":
                    start = client.state.setdefault("personal", params)
                    client.state["personal"], loss = self.executor.train(start, phase, epochs, loss_fn, ctx,
                                                                         fed.train_idx[i], keys)
                else:
                    params, loss = self.executor.train(params, phase, epochs, loss_fn, ctx, fed.train_idx[i], keys)
                losses.append(loss)
            client.state["params"] = params
            uploads[i] = method.upload(ctx, params, client, self.executor)
        method.aggregate(self.server, uploads, self.clients)
        return {"train_loss": float(np.mean(losses)) if losses else float("nan"),
                "uploaded_per_client": _count(list(uploads.values())) / max(len(uploads), 1)}

    # ------------------------------------------------------------------ evaluation
    def _confusions(self, params: dict, idx: torch.Tensor, client: Client | None) -> np.ndarray:
        out = self.executor.features(params, self.fed.data.test_x[idx])
        pred = self.method.predict(out, self.server, client)
        return confusion(self.fed.data.test_y[idx], pred, self.fed.num_classes)

    def _finetuned(self, params: dict, phase, client: Client, t: int) -> dict:
        """Evaluation-time adaptation on the client's training data (on a copy; nothing is kept)."""
        ctx = Context(client, t, self.fed.num_classes, {}, self.executor.model_fn, self.lr, self.fed.train_idx[client.id])
        tuned, _ = self.executor.train(params, phase, phase.epochs or 1, phase.loss or self.method.local_loss,
                                       ctx, self.fed.train_idx[client.id], (self.seed, t, client.id, 99))
        return tuned

    @staticmethod
    def _record_personal_local(record: dict, conf: dict, local: list) -> None:
        """The metrics of every client's own model on its own test set (the papers' PFL metric)."""
        conf["personal_local"] = local
        record.update({f"personal_local_{k}": v for k, v in summarize(local).items()})
        record["personal_local_acc_clients"] = [accuracy(C) for C in local]

    def evaluate(self, t: int) -> dict:
        method, fed = self.method, self.fed
        record: dict = {}
        conf: dict = {}
        if method.personalized:
            local, global_ = [], []
            finetune = method.finetune_phase()
            for c in self.clients:
                params = method.eval_params(self.server, c)
                if finetune is not None:
                    params = self._finetuned(params, finetune, c, t)
                local.append(self._confusions(params, fed.test_idx[c.id], c))
                if self.eval_personal_global:
                    global_.append(self._confusions(params, self.global_test, c))
            self._record_personal_local(record, conf, local)
            if global_:
                conf["personal_global"] = global_
                record.update({f"personal_global_{k}": v for k, v in summarize(global_).items()})
        gparams = method.global_params(self.server, self.clients)
        if gparams is not None:
            C = self._confusions(gparams, self.global_test, None)
            conf["global_global"] = [C]
            record.update({"global_acc": accuracy(C), "global_f1": macro_f1(C)})
            local = [self._confusions(gparams, fed.test_idx[c.id], c) for c in self.clients]
            conf["global_local"] = local
            record.update({f"global_local_{k}": v for k, v in summarize(local).items()})
            if not method.personalized:  # the global model is every client's model
                self._record_personal_local(record, conf, local)
        self.final_confusions = conf
        return record

    # ------------------------------------------------------------------ the loop
    def run(self) -> list[dict]:
        self._resume()
        bar = tqdm(range(self.start_round, self.rounds), initial=self.start_round, total=self.rounds,
                   desc=self.desc or self.method.name, leave=False,
                   **({} if self.progress else {"disable": True}))  # TQDM_DISABLE=1 still applies
        for t in bar:
            t0 = time.perf_counter()
            row = {"round": t + 1, **self.run_round(t), **self.method.round_log(self.server)}
            if (t + 1) % self.eval_every == 0 or t + 1 == self.rounds:
                row.update(self.evaluate(t))
            for callback in self.on_round:
                callback(self, t)
            self.elapsed += time.perf_counter() - t0
            row["elapsed_s"] = self.elapsed
            self.history.append(row)
            if "personal_local_acc" in row:
                bar.set_postfix(acc=f"{row['personal_local_acc']:.3f}", loss=f"{row['train_loss']:.3f}")
            self._save(t + 1)
        return self.history

    # ------------------------------------------------------------------ checkpoints
    def _state(self, done: int) -> dict:
        return {"round": done, "server": self.server.state, "clients": [c.state for c in self.clients],
                "history": self.history, "elapsed": self.elapsed, "final_confusions": self.final_confusions}

    def _save(self, done: int) -> None:
        if self.checkpoint is None:
            return
        self.checkpoint.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.checkpoint.with_suffix(".tmp")
        torch.save(self._state(done), tmp)
        os.replace(tmp, self.checkpoint)

    def _resume(self) -> None:
        if self.checkpoint is None or not self.checkpoint.exists():
            return
        state = torch.load(self.checkpoint, map_location=self.fed.data.train_x.device, weights_only=False)
        self.start_round = state["round"]
        self.server.state = state["server"]
        for c, s in zip(self.clients, state["clients"]):
            c.state = s
        self.history, self.elapsed = state["history"], state["elapsed"]
        self.final_confusions = state.get("final_confusions", {})
