"""The server side of a fedlib experiment on Flower: the cohort executor that hands a round's clients to the
nodes that hold them, and the ServerApp that runs fedlib's one round loop (``Federation.run``) with it."""
from __future__ import annotations

import dataclasses
import os
import threading
import time
from pathlib import Path

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid, ServerApp

from fedlib.engine.client import ClientResult, ClientTask
from fedlib.engine.core import ClientContext, LocalResult
from fedlib.errors import ClientFailed, ConfigError, TrainingDiverged
from fedlib.flower.checks import check_evaluate_reply, check_train_reply
from fedlib.flower.codec import TENSORS, TREE, from_records, to_records
from fedlib.flower.messages import (
    RUN,
    TRAINED_IN,
    check_declared,
    config_from_json,
    config_json,
    first_error_line,
    message_bytes,
)
from fedlib.flower.secure import secure_round

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
        self.sizes: dict[int, int] = {}   # {client: training samples}, set by ``bind``
        self.model: dict | None = None    # {name: tensor} of the model, the uploads' reference, set by ``bind``
        self._holder: dict[int, int] | None = None
        self.traffic = {"messages": 0, "bytes": 0}   # both directions, envelopes and tensors (``message_bytes``)
        # {round: clients} left out of the round's aggregate: their node was lost (node_loss="continue", or SecAgg+
        # went on without it)
        self.left_out: dict[int, list[int]] = {}

    def bind(self, fed) -> None:
        """The federation built around this executor: its method, and its clients' sample counts."""
        self.method = fed.method
        self.weight_bound = float(fed.data.train_counts.sum())
        self.sizes = {i: int(c.sum()) for i, c in enumerate(fed.data.train_counts)}
        self.model = {k: v.detach() for k, v in fed.trainer.model.state_dict().items()}

    def _refused(self, replies: dict[int, dict], problem_of) -> None:
        """Apply ``problem_of(node, reply)`` ("" or why the reply is refused) to every reply: a refused reply is its
        node's failure, which stops the run, or under ``node_loss="continue"`` loses the node (its clients are left
        out like a lost node's)."""
        for node in list(replies):
            problem = problem_of(node, replies[node])
            if not problem:
                continue
            if self.node_loss != "continue":
                raise ClientFailed(f"refused: {problem}")
            self._lose(node, f"refused: {problem}")
            del replies[node]

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
        sent = {node: [self._envelope(x) for x in group] for node, group in groups.items()}
        replies = self._exchange({node: ("train", {"round": t, "tasks": envelopes})
                                  for node, envelopes in sent.items()}, f"round {t + 1}")
        self._refused(replies, lambda node, reply: check_train_reply(node, t, sent[node], reply, self.sizes,
                                                                     self.model))
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
        sent = {node: [self._envelope(x) for x in group] for node, group in groups.items()}
        replies = self._exchange({node: ("evaluate", {**message, "tasks": envelopes})
                                  for node, envelopes in sent.items()}, f"evaluation after round {t + 1}")
        self._refused(replies, lambda node, reply: check_evaluate_reply(node, t, sent[node], jobs, reply))
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
