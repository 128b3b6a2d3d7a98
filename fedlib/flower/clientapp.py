"""The node side of a fedlib experiment on Flower: the ClientApp that runs fedlib's client side
(``local_update``) and the evaluation of the clients a node holds, their models and private state kept on the node."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from fedlib.engine.client import ClientTask, local_update
from fedlib.engine.core import own_copy
from fedlib.errors import ClientFailed, TrainingDiverged
from fedlib.flower.codec import TENSORS, TREE, from_records, to_records
from fedlib.flower.messages import (
    PRIVATE,
    RUN,
    check_declared,
    config_from_json,
    held_clients,
)
from fedlib.flower.secure import asks_secure, node_vector, secure_when_asked

_BUILT: dict = {}   # per process: the experiment a node trains clients of (key -> Federation)


def _experiment(cfg):
    from fedlib.experiment.wiring import build

    key = cfg.key()
    if key not in _BUILT:
        _BUILT.clear()
        _BUILT[key] = build(dataclasses.replace(cfg, executor="sequential"), progress=False)
    return _BUILT[key]


class PrivateSlots:
    """A node's clients' models and private states, by client and the round they were trained in: in the
    node's ``Context.state`` (alive as long as its SuperNode) and, with a state folder, on its own disk
    (a restarted node or a resumed run finds them there). The two latest versions of a client are kept, so
    that a run resumed from the checkpoint before a round finds the state that round started from."""

    KEEP = 2

    def __init__(self, context: Context, fed, run: ConfigRecord, experiment: str):
        self.context, self.fed = context, fed
        folder = str(context.node_config.get("state-dir", "") or run.get("state-dir", "") or "")
        self.folder = Path(folder) / experiment if folder else None

    def _key(self, client: int, trained_in: int) -> str:
        return f"{PRIVATE}.{client}.r{trained_in}"

    def load(self, client: int, trained_in: int | None) -> tuple[dict, dict]:
        """(model, state) of ``client`` as it was after round ``trained_in`` (None: never trained: the initial
        slot every node builds alike from the config)."""
        if trained_in is None:
            slot = self.fed.clients[client]
            return own_copy(slot.model), own_copy(slot.state)
        key = self._key(client, trained_in)
        if f"{key}.{TENSORS}" in self.context.state:
            records = RecordDict({TENSORS: self.context.state[f"{key}.{TENSORS}"],
                                  TREE: self.context.state[f"{key}.{TREE}"]})
            slot = from_records(records, self.fed.data.data.train_x.device)
            return slot["model"], slot["state"]
        path = None if self.folder is None else self.folder / f"c{client}-r{trained_in}.pt"
        if path is not None and path.exists():
            from fedlib import serial

            slot = serial.load(path, map_location=self.fed.data.data.train_x.device)
            return slot["model"], slot["state"]
        raise ClientFailed(f"client {client}'s model and private state after round {trained_in + 1} are not on "
                           "this node (its SuperNode restarted, or the run resumed in a new federation, without a "
                           "state folder: --node-config \"state-dir='...'\")")

    def store(self, client: int, trained_in: int, model: dict, state: dict) -> None:
        key = self._key(client, trained_in)
        records = to_records({"model": model, "state": state}, f"client {client}'s private slot")
        self.context.state[f"{key}.{TENSORS}"] = records.array_records[TENSORS]
        self.context.state[f"{key}.{TREE}"] = records.config_records[TREE]
        if self.folder is not None:
            from fedlib.store import atomic_save

            self.folder.mkdir(parents=True, exist_ok=True)
            atomic_save({"model": model, "state": state}, self.folder / f"c{client}-r{trained_in}.pt")
        self._forget_old(client)

    def _forget_old(self, client: int) -> None:
        prefix = f"{PRIVATE}.{client}.r"
        rounds = sorted({int(k[len(prefix):].split(".")[0]) for k in self.context.state if k.startswith(prefix)})
        for r in rounds[:-self.KEEP]:
            for part in (TENSORS, TREE):
                del self.context.state[f"{prefix}{r}.{part}"]
            if self.folder is not None:
                (self.folder / f"c{client}-r{r}.pt").unlink(missing_ok=True)


def _node_request(msg: Message, context: Context):
    """The config, the node's experiment and its private slots for a server message; the message decoded."""
    run = msg.content.config_records[RUN]
    cfg = config_from_json(str(run["config"]))
    fed = _experiment(cfg)
    content = from_records(msg.content, cfg.device)
    held = held_clients(context.node_config, cfg.num_clients)
    for task in content.get("tasks", ()):
        if task["client_id"] not in held:
            raise ClientFailed(f"client {task['client_id']} was sent to a node that holds clients {held}")
    return fed, content, PrivateSlots(context, fed, run, cfg.key())


def _reply(msg: Message, content: dict, what: str) -> Message:
    return Message(content=to_records(content, what), reply_to=msg)


client_app = ClientApp(mods=[secure_when_asked])


@client_app.query()
def query(msg: Message, context: Context) -> Message:
    """Which clients this node holds."""
    run = msg.content.config_records[RUN]
    cfg = config_from_json(str(run["config"]))
    return _reply(msg, {"clients": held_clients(context.node_config, cfg.num_clients)}, "the node's clients")


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    """One round of this node's sampled clients: fedlib's client side, the private slots kept here."""
    fed, content, slots = _node_request(msg, context)
    t = int(content["round"])
    results, diverged, uploads = [], {}, []
    for envelope in content["tasks"]:
        i = envelope["client_id"]
        model, state = slots.load(i, envelope["trained_in"])
        task = ClientTask(i, t, envelope["received"], state, model)
        try:
            result = local_update(fed.method, task, fed.setup, fed.trainer)
        except TrainingDiverged as exc:   # an outcome of training, not a failure of the node: sent back as such
            diverged[i] = str(exc)
            continue
        check_declared(fed.method, "upload", result.upload, i)
        slots.store(i, t, result.model, result.state)
        results.append({"client_id": i, "upload": result.upload, "result": dataclasses.asdict(result.result)})
        uploads.append(result.upload)
    if asks_secure(msg):   # SecAgg+'s masked-vector stage: one vector for the node, masked by secaggplus_mod
        report = {"results": [{k: r[k] for k in ("client_id", "result")} for r in results], "diverged": diverged}
        first = content["tasks"][0]["received"] if content["tasks"] else {}
        return Message(content=node_vector(first, uploads, report, [r["client_id"] for r in results]), reply_to=msg)
    return _reply(msg, {"round": t, "results": results, "diverged": diverged}, "the node's round results")


@client_app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """The client families of an evaluation for this node's clients: confusion counts only."""
    fed, content, slots = _node_request(msg, context)
    t = int(content["round"])
    tasks = []
    for envelope in content["tasks"]:
        model, state = slots.load(envelope["client_id"], envelope["trained_in"])
        tasks.append(ClientTask(envelope["client_id"], t, envelope["received"], state, model))
    anon = fed.anonymous_context(t, received=content["anonymous"])
    confusions = fed.evaluator.client_confusions(t, tasks, content["jobs"], content["global"], anon)
    return _reply(msg, {"round": t, "confusions": confusions}, "the node's confusion counts")
