"""A fedlib experiment as a Flower ServerApp and ClientApp, with each client's data, private state and
evaluation on the node that holds it.

The ServerApp runs fedlib's one round loop (``Federation.run``: sampling, the method's broadcast and
aggregate hooks, evaluation, checkpoints) with a cohort executor that hands the round's clients to the
nodes that hold them: the round logic is not copied. The ClientApp runs the client side of fedlib
(``local_update``: receive, local phases, upload) for the clients of its node.

Which node holds which client: a SuperNode started with ``--node-config "clients='3,7'"`` holds clients 3
and 7; in Flower's simulation runtime node ``p`` of ``n`` (its ``partition-id``) holds the clients ``i`` with
``i mod n = p``. The server asks every node once (a ``query`` message) and sends a client's tasks only to
its holder. A node builds its clients' data from the config (the rehearsal: the built-in datasets'
partition; a deployment's node reads the same files from its own storage).

What travels (as Flower records, ``codec``), per node and round: server -> node, its clients' ids and what
the method's broadcast sent each (checked against the method's declared ``broadcast_keys``); node -> server,
each client's upload (checked against ``upload_keys``) and its loss and step counts. A client's model and
private state (Ditto's personal model, SCAFFOLD's control variate, FedGPA's personal model) stay in the
node's ``Context.state`` and never leave it; the server keeps only the round each client last trained in.
Evaluation on the clients' local test sets runs on the nodes (an ``evaluate`` message: the client families
the metric sets need, the global model where one is evaluated there); only confusion counts come back.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import threading
import time
from pathlib import Path

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid, ServerApp

from fedlib.engine.client import ClientResult, ClientTask, local_update
from fedlib.engine.core import ClientContext, LocalResult, own_copy
from fedlib.errors import ClientFailed, ConfigError, TrainingDiverged
from fedlib.flower.codec import TENSORS, TREE, from_records, to_records
from fedlib.flower.secure import asks_secure, node_vector, secure_round, secure_when_asked

RUN = "fedlib.run"
TRAINED_IN = "fedlib.trained_in"     # the server's receipt in a client's slot: the round it last trained in
PRIVATE = "fedlib.client"            # prefix of a client's private slot in its node's Context.state

# set by ``simulate``'s signal handlers (Ctrl-C, SIGTERM): the ServerApp's thread stops at its next poll
STOP = threading.Event()

# what a lost node does to a run (``FlowerExecutor(node_loss=...)``, run config ``node-loss``): "stop" it with a
# clear error, or "continue" without the node's clients (each round and evaluation says which are left out)
NODE_LOSS = ("stop", "continue")
# Flower's error codes for a node that is gone (not for a client's exception, which always stops the run)
LOST_CODES = (ErrorCode.NODE_UNAVAILABLE, ErrorCode.MESSAGE_UNAVAILABLE, ErrorCode.REPLY_MESSAGE_UNAVAILABLE)

# ``WIRE_TAP``: a list, when set, receives every message the server sends and receives, decoded as
# (direction "to node" | "from node", message type, node id, content): the tests' audit of what travels
WIRE_TAP: list | None = None


class UndeclaredKey(ValueError):
    """A method sent a key its class does not declare."""


def first_error_line(report: str) -> str:
    """The client's own exception ("RuntimeError: disk full") out of a node's error report, which wraps it
    in the runtime's tracebacks; the report's last line when none is found."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in report.splitlines()]
    lines = [line for line in lines if line]
    for line in lines:
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b[^:]*: \S", line) and \
                "ClientAppException" not in line and "RayTaskError" not in line:
            return line
    return lines[-1] if lines else "(no report)"


def config_json(cfg) -> str:
    return json.dumps(cfg.flat(), default=str)


def config_from_json(text: str):
    from fedlib.experiment.config import make_config

    return make_config(**json.loads(text))


def check_declared(method, kind: str, message: dict, client_id: int) -> None:
    """Refuse a broadcast or upload with a key the method does not declare (``Method.declared``)."""
    allowed = type(method).declared(kind)
    extra = sorted(set(message) - allowed)
    if extra:
        raise UndeclaredKey(f"{method.name}'s {kind} to/from client {client_id} holds {extra}, which "
                            f"{type(method).__name__} does not declare in `{kind}_keys` (declared: "
                            f"{sorted(allowed)}); declare what the paper sends, nothing else travels")


def held_clients(node_config, num_clients: int) -> list[int]:
    """The clients a node holds: its node config's ``clients`` ("3,7" or "0-4,9"), else in a simulation
    its ``partition-id`` p of ``num-partitions`` n (the clients i with i mod n = p)."""
    if "clients" in node_config:
        text = str(node_config["clients"])
        ids: list[int] = []
        try:
            for part in filter(None, (p.strip() for p in text.split(","))):
                lo, _, hi = part.partition("-")
                ids.extend(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            raise ConfigError("node config clients", text, "client ids such as '3,7' or '0-4,9'") from None
        bad = [i for i in ids if not 0 <= i < num_clients]
        if bad:
            raise ConfigError("node config clients", text, f"ids from 0 to {num_clients - 1} (the config has "
                                                           f"{num_clients} clients)")
        return sorted(set(ids))
    if "partition-id" in node_config:
        p, n = int(node_config["partition-id"]), int(node_config["num-partitions"])
        return list(range(p, num_clients, n))
    raise ConfigError("node config", dict(node_config), "clients='<ids>' (flower-supernode --node-config "
                                                        "\"clients='0,2'\") naming the clients this node holds")


def message_bytes(records: RecordDict) -> int:
    """The payload of a message: its tensors' bytes, its config records' bytes and text (SecAgg+'s keys, shares
    and masked vectors travel there as bytes)."""
    def size(value) -> int:
        if isinstance(value, bytes):
            return len(value)
        if isinstance(value, list):
            return sum(size(v) for v in value)
        return len(str(value))

    tensors = sum(len(a.data) for rec in records.array_records.values() for a in rec.values())
    return tensors + sum(size(v) for rec in records.config_records.values() for v in rec.values())


# ---------------------------------------------------------------------- server side
class FlowerExecutor:
    """A cohort executor whose clients live on the Flower nodes that hold them (reached through ``grid``).

    One message per node and round carries the tasks of its clients; a client's model and state stay on its
    node, the server's slot keeps only the round it last trained in. Evaluation of the client families runs
    there too (``client_confusions``, which the Evaluator calls in place of its own)."""

    name = "flower"

    def __init__(self, grid: Grid, cfg, method, timeout: float | None = None, poll_s: float = 0.02,
                 min_nodes: int = 1, connect_s: float = 120.0, state_dir: str | None = None, node_loss: str = "stop"):
        if node_loss not in NODE_LOSS:
            raise ConfigError("node_loss", node_loss, f"one of {', '.join(NODE_LOSS)}")
        self.grid, self.method, self.timeout, self.poll_s = grid, method, timeout, poll_s
        self.node_loss = node_loss
        self.gone: dict[int, str] = {}   # nodes lost under node_loss="continue": {node: why}
        self.min_nodes, self.connect_s = min_nodes, connect_s
        self.num_clients = cfg.num_clients
        self.run_record = {"config": config_json(cfg), "state-dir": state_dir or ""}
        self.device = cfg.device
        self.secure = cfg.secure_aggregation is not None   # SecAgg+ between the nodes (``fedlib.flower.secure``)
        self.weight_bound = 1.0   # the most samples a round's clients hold (SecAgg+'s max_weight), set by ``bind``
        self._holder: dict[int, int] | None = None
        self.traffic = {"messages": 0, "bytes": 0}   # both directions, envelopes and tensors (``message_bytes``)
        # {round: clients} left out of the round's aggregate: their node was lost (node_loss="continue", or SecAgg+
        # went on without it)
        self.left_out: dict[int, list[int]] = {}

    def bind(self, fed) -> None:
        """The federation built around this executor: its method, and its clients' total sample count."""
        self.method = fed.method
        self.weight_bound = float(fed.data.train_counts.sum())

    # ---------------------------------------------------------------- the exchange
    def _exchange(self, contents: dict[int, tuple[str, dict]], what: str) -> dict[int, dict]:
        """Send ``contents`` ({node: (message type, message)}) and wait for every reply: {node: content}. A node
        that stops answering (unavailable, or silent past ``timeout``) stops the run, or under
        ``node_loss="continue"`` is lost (``gone``) and left out of the replies; a client's exception stops it."""
        pending: dict[str, int] = {}
        for node, (kind, content) in contents.items():
            if WIRE_TAP is not None:
                WIRE_TAP.append(("to node", kind, node, content))
            records = self._records(kind, node, content)
            self._count(records)
            ids = list(self.grid.push_messages([Message(content=records, dst_node_id=node, message_type=kind)]))
            if not ids:
                raise ClientFailed(f"{what}: the message could not be sent to node {node}")
            pending[ids[0]] = node
        replies: dict[int, dict] = {}
        deadline = None if self.timeout is None else time.time() + self.timeout
        while pending:
            for reply in self.grid.pull_messages(list(pending)):
                node = pending.pop(reply.metadata.reply_to_message_id)
                if reply.has_error():
                    reason = reply.error.reason or ""
                    if self.node_loss == "continue" and reply.error.code in LOST_CODES:
                        self._lose(node, first_error_line(reason))
                        continue
                    ids = sorted(t["client_id"] for t in contents[node][1].get("tasks", ()))
                    who = (f"client {ids[0]} failed on its Flower node" if len(ids) == 1 else
                           f"clients {ids} failed on their Flower node" if ids else f"Flower node {node} failed")
                    raise ClientFailed(f"{who} ({what}): {first_error_line(reason)}", reason)
                self._count(reply.content)
                replies[node] = from_records(reply.content, self.device)
                if WIRE_TAP is not None:
                    WIRE_TAP.append(("from node", reply.metadata.message_type, node, replies[node]))
            if pending and deadline is not None and time.time() > deadline:
                if self.node_loss == "continue":
                    for node in pending.values():
                        self._lose(node, f"no answer within {self.timeout} s")
                    break
                raise ClientFailed(f"{what}: Flower node(s) {sorted(pending.values())} did not answer within "
                                   f"{self.timeout} s")
            if STOP.is_set():
                raise KeyboardInterrupt
            if pending:
                time.sleep(self.poll_s)
        return replies

    def _lose(self, node: int, why: str) -> None:
        self.gone[node] = why
        held = sorted(i for i, n in (self._holder or {}).items() if n == node)
        print(f"fedlib: Flower node {node} is lost ({why}); the run goes on without its clients {held}")

    def _leave_out(self, t: int, clients: list[int], why: str) -> None:
        self.left_out[t] = sorted(set(self.left_out.get(t, [])) | set(clients))
        print(f"fedlib: round {t + 1}: clients {clients} are not in the aggregate ({why})")

    def _records(self, kind: str, node: int, content: dict) -> RecordDict:
        records = to_records(content, f"the {kind} message to node {node}")
        records[RUN] = ConfigRecord(dict(self.run_record))
        return records

    def _count(self, records: RecordDict) -> None:
        self.traffic["messages"] += 1
        self.traffic["bytes"] += message_bytes(records)

    def _nodes(self) -> list[int]:
        """The connected nodes, once at least ``min_nodes`` are (nodes may register after the ServerApp
        starts, in a simulation as in a deployment)."""
        deadline = time.time() + self.connect_s
        while True:
            nodes = sorted(self.grid.get_node_ids())
            if len(nodes) >= self.min_nodes:
                return nodes
            if STOP.is_set():
                raise KeyboardInterrupt
            if time.time() > deadline:
                raise ClientFailed(f"{len(nodes)} Flower node(s) connected after {self.connect_s:.0f} s; "
                                   f"{self.min_nodes} needed")
            time.sleep(0.2)

    def holders(self) -> dict[int, int]:
        """{client: node}, asked of every node once: each client must be held by exactly one node."""
        if self._holder is None:
            replies = self._exchange({node: ("query", {}) for node in self._nodes()}, "asking the nodes for clients")
            holder: dict[int, int] = {}
            for node, reply in sorted(replies.items()):
                for i in reply["clients"]:
                    if i in holder:
                        raise ClientFailed(f"client {i} is held by two Flower nodes ({holder[i]} and {node}): give "
                                           "each client to one node (--node-config clients=...)")
                    holder[i] = node
            missing = [i for i in range(self.num_clients) if i not in holder]
            if missing:
                raise ClientFailed(f"clients {missing} are held by no connected Flower node ({len(replies)} "
                                   f"connected): start their nodes, or give them to one (--node-config clients=...)")
            self._holder = holder
        return self._holder

    def _by_node(self, tasks: list[ClientTask]) -> dict[int, list[ClientTask]]:
        holder = self.holders()
        groups: dict[int, list[ClientTask]] = {}
        for task in tasks:
            groups.setdefault(holder[task.client_id], []).append(task)
        return groups

    @staticmethod
    def _envelope(task: ClientTask) -> dict:
        """What a node is sent about one client: its id, what the server's broadcast sent it and the round
        it last trained in (so that its node checks it holds that client's state); no state, no model."""
        return {"client_id": task.client_id, "received": task.received,
                "trained_in": task.state.get(TRAINED_IN)}

    # ---------------------------------------------------------------- the executor
    def run(self, method, tasks: list[ClientTask]) -> list[ClientResult]:
        if method is not self.method:
            raise ConfigError("executor", "flower", "the method the federation was built with: a client's "
                              "evaluation-time adaptation runs on its node, inside evaluation")
        for task in tasks:
            check_declared(method, "broadcast", task.received, task.client_id)
        t = tasks[0].round if tasks else 0
        groups = self._by_node(tasks)
        unreachable = [x.client_id for node in groups if node in self.gone for x in groups[node]]
        if unreachable:
            self._leave_out(t, unreachable, "their Flower node is lost")
        groups = {node: group for node, group in groups.items() if node not in self.gone}
        if self.secure:
            return self._secure_run(tasks, groups, t)
        replies = self._exchange({node: ("train", {"round": t, "tasks": [self._envelope(x) for x in group]})
                                  for node, group in groups.items()}, f"round {t + 1}")
        for reply in replies.values():
            for r in reply["results"]:
                check_declared(method, "upload", r["upload"], r["client_id"])
        out = self._results(tasks, t, replies.values(), lambda r: r["upload"])
        lost = [x.client_id for node, group in groups.items() if node not in replies for x in group]
        if lost:
            self._leave_out(t, lost, "their Flower node was lost in this round")
        if not out:
            raise ClientFailed(f"round {t + 1}: no Flower node holding its clients is left ({self.gone})")
        return [out[task.client_id] for task in tasks if task.client_id in out]

    @staticmethod
    def _results(tasks: list[ClientTask], t: int, reports, upload_of) -> dict[int, ClientResult]:
        """{client: its ClientResult} from the nodes' reports (``upload_of(result)``: the upload it stands for); as
        in-process, a client whose loss became non-finite (the first of the cohort) stops the round."""
        out: dict[int, ClientResult] = {}
        diverged: dict[int, str] = {}
        for report in reports:
            diverged.update({int(i): why for i, why in report["diverged"].items()})
            for r in report["results"]:
                out[r["client_id"]] = ClientResult(r["client_id"], upload_of(r), {}, {TRAINED_IN: t},
                                                   LocalResult(**r["result"]), {})
        if diverged:
            first = next(task.client_id for task in tasks if task.client_id in diverged)
            raise TrainingDiverged(diverged[first])
        return out

    def _secure_run(self, tasks: list[ClientTask], groups: dict[int, list[ClientTask]], t: int) -> list[ClientResult]:
        """The round with SecAgg+ between the nodes: each client that took part gets the unmasked mean as its
        upload (``Method.aggregate``'s weighted mean of equal vectors is that mean)."""
        messages = {node: self._records("train", node, {"round": t, "tasks": [self._envelope(x) for x in group]})
                    for node, group in groups.items()}
        mean, reports = secure_round(ObservedGrid(self), messages, self.weight_bound, t, self.timeout)
        mean = {k: v.to(self.device) for k, v in mean.items()}
        out = self._results(tasks, t, reports, lambda r: {"params": mean, "n": 1})
        missing = [x.client_id for group in groups.values() for x in group if x.client_id not in out]
        if missing:   # their node dropped out of the protocol: SecAgg+ unmasked the sum without it
            if self.node_loss == "stop":
                raise ClientFailed(f"clients {missing} are not in round {t + 1}'s secure aggregate: their Flower node "
                                   "dropped out of SecAgg+ (node-loss 'continue' goes on without them)")
            for node in {self.holders()[i] for i in missing}:
                self._lose(node, "it dropped out of SecAgg+")
            self._leave_out(t, missing, "their Flower node dropped out of SecAgg+")
        return [out[task.client_id] for task in tasks if task.client_id in out]

    def client_confusions(self, t: int, tasks: list[ClientTask], jobs: dict[str, str], gparams,
                          anon: ClientContext) -> dict[str, list[dict | None]]:
        """The Evaluator's client families, computed on the nodes: {family: [per task {variant: confusion}]}; None
        for the tasks whose node is lost (``node_loss="continue"``)."""
        for task in tasks:
            if task.received:
                check_declared(self.method, "broadcast", task.received, task.client_id)
        groups = {node: group for node, group in self._by_node(tasks).items() if node not in self.gone}
        message = {"round": t, "jobs": jobs, "global": gparams, "anonymous": anon.received}
        replies = self._exchange({node: ("evaluate", {**message, "tasks": [self._envelope(x) for x in group]})
                                  for node, group in groups.items()}, f"evaluation after round {t + 1}")
        position = {node: 0 for node in groups}
        out: dict[str, list[dict | None]] = {family: [] for family in jobs}
        for task in tasks:   # back in the order of the tasks
            node = self.holders()[task.client_id]
            k = position.get(node, 0)
            position[node] = k + 1
            for family in jobs:
                out[family].append(replies[node]["confusions"][family][k] if node in replies else None)
        if not replies:
            raise ClientFailed(f"evaluation after round {t + 1}: no Flower node holding clients is left ({self.gone})")
        return out

    def close(self) -> None:
        pass


class ObservedGrid:
    """The grid as SecAgg+'s stages use it, every message counted (and tapped) as ``FlowerExecutor._exchange``
    counts its own: fedlib's messages decoded, the protocol's as the names and sizes of their records."""

    def __init__(self, executor: FlowerExecutor):
        self.executor = executor

    @staticmethod
    def _seen(records: RecordDict):
        if TREE in records.config_records and TENSORS in records.array_records:
            return from_records(records)
        return {"configs": {name: sorted(rec) for name, rec in records.config_records.items()},
                "arrays": {name: len(rec) for name, rec in records.array_records.items()}}

    def send_and_receive(self, messages, *, timeout: float | None = None):
        messages = list(messages)
        for m in messages:
            self.executor._count(m.content)
            if WIRE_TAP is not None:
                WIRE_TAP.append(("to node", "secagg+", m.metadata.dst_node_id, self._seen(m.content)))
        replies = list(self.executor.grid.send_and_receive(messages, timeout=timeout))
        for r in replies:
            if not r.has_error():
                self.executor._count(r.content)
                if WIRE_TAP is not None:
                    WIRE_TAP.append(("from node", "secagg+", r.metadata.src_node_id, self._seen(r.content)))
        return replies


def serve(grid: Grid, cfg, *, checkpoint=None, progress: bool = False, desc: str = "", timeout: float | None = None,
          callbacks=(), min_nodes: int = 1, node_loss: str = "stop"):
    """Build the experiment around a Flower executor and run fedlib's round loop; the Federation. ``node_loss``:
    what a node that stops answering does (``NODE_LOSS``)."""
    from fedlib.engine.loop import node_folder
    from fedlib.experiment.wiring import build

    state_dir = str(node_folder(Path(checkpoint))) if checkpoint else None
    holder: dict = {}

    def executor(setup, trainer, **_):
        holder["executor"] = FlowerExecutor(grid, cfg, None, timeout=timeout, min_nodes=min_nodes,
                                            state_dir=state_dir, node_loss=node_loss)
        return holder["executor"]

    fed = build(cfg, progress=progress, checkpoint=checkpoint, desc=desc, executor=executor)
    holder["executor"].bind(fed)
    fed.on_round.extend(callbacks)
    fed.run()
    return fed


def make_server_app(cfg, sink: dict, **options) -> ServerApp:
    """A ServerApp that runs ``cfg`` and leaves its Federation (or its exception) in ``sink``."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        try:
            sink["federation"] = serve(grid, cfg, **options)
        except BaseException as exc:  # handed to the caller: the simulation runtime only logs it
            sink["error"] = exc

    return app


# The ServerApp of a deployment (``flwr run``): the config comes from the run config, the result
# record goes to the path in ``out``.
server_app = ServerApp()


@server_app.main()
def deployed_server(grid: Grid, context: Context) -> None:
    from fedlib.experiment.records import record_of

    global WIRE_TAP
    cfg = config_from_json(str(context.run_config["config"]))
    timeout = float(context.run_config.get("client-timeout", 0)) or None
    checked = bool(context.run_config.get("audit", False))   # audit every message (``fedlib.flower.audit``)
    if checked:
        WIRE_TAP = []
    started = time.time()
    fed = serve(grid, cfg, progress=True, timeout=timeout, min_nodes=int(context.run_config.get("min-nodes", 1)),
                node_loss=str(context.run_config.get("node-loss", "stop")))
    record = record_of(dataclasses.replace(cfg, engine="flower"), fed, started)
    if checked:
        from fedlib.flower.audit import audit

        counts = audit(WIRE_TAP or [], fed)   # raises WireViolation, naming the message, if one fails
        record["audit"] = {"passed": True, "messages": {f"{d} {k}": n for (d, k), n in sorted(counts.items())}}
        print(f"fedlib: message audit passed ({sum(counts.values())} messages)")
    out = str(context.run_config.get("out", "") or "fedlib-flower-record.json")
    from fedlib.store import atomic_json

    atomic_json(Path(out), record)
    traffic, rounds = fed.executor.traffic, max(len(fed.history), 1)
    print(f"fedlib: record written to {os.path.abspath(out)}; final {record['final']}")
    print(f"fedlib: {fed.elapsed / rounds:.1f} s per round; {traffic['messages'] / rounds:.1f} messages and "
          f"{traffic['bytes'] / rounds / 1e6:.3f} MB per round (both directions, the first round's query included)")


# ---------------------------------------------------------------------- client side
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
    return _reply(msg, {"results": results, "diverged": diverged}, "the node's round results")


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
    return _reply(msg, {"confusions": confusions}, "the node's confusion counts")
