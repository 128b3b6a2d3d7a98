"""What the server checks of every reply a Flower node sends: it trusts no node. A reply must answer the round it
was asked about, for exactly the clients that node was sent; every tensor it carries is finite, and one that stands
for model parameters has the model's names, shapes and dtypes; sample counts lie within
the client's training set, confusion counts are non-negative. Each check returns a one-line reason, or "" when the
reply passes; the executor treats a refused reply as that node's failure (``node_loss``)."""
from __future__ import annotations

import math
from collections.abc import Iterator

import torch


def tensors(tree, path: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """(path, tensor) of every tensor in a nested message value."""
    if isinstance(tree, torch.Tensor):
        yield path, tree
    elif isinstance(tree, dict):
        for key, value in tree.items():
            yield from tensors(value, f"{path}.{key}" if path else str(key))
    elif isinstance(tree, (list, tuple)):
        for i, value in enumerate(tree):
            yield from tensors(value, f"{path}[{i}]")


def _round(node: int, t: int, reply: dict) -> str:
    got = reply.get("round")
    return "" if got == t else f"node {node} answered for round {got} when asked about round {t + 1}"


def _clients(node: int, t: int, sent: list[int], answered: list[int]) -> str:
    """Exactly the clients the node was sent, once each."""
    extra = sorted(set(answered) - set(sent))
    if extra:
        return f"node {node} reported client(s) {extra} in round {t + 1}, which it was not sent"
    missing = sorted(set(sent) - set(answered))
    if missing:
        return f"node {node} left client(s) {missing} out of its round-{t + 1} reply"
    if len(answered) != len(set(answered)):
        return f"node {node} reported a client twice in round {t + 1}"
    return ""


def _like(node: int, client: int, t: int, key: str, got, expected: dict[str, torch.Tensor]) -> str:
    """Model parameters a client uploads are the model's: known names, the model's shapes and dtypes (a method may
    upload a part of the model, or more of it than it was sent: FedPAC sends the body and gets the whole model)."""
    found = dict(tensors(got))
    unknown = sorted(set(found) - set(expected))
    if unknown:
        return (f"node {node}, client {client}, round {t + 1}: upload '{key}' has parameters the model does not: "
                f"{unknown[:3]}")
    for name, tensor in found.items():
        if tensor.shape != expected[name].shape or tensor.dtype != expected[name].dtype:
            return (f"node {node}, client {client}, round {t + 1}: upload '{key}.{name}' is {tuple(tensor.shape)} "
                    f"{tensor.dtype}, the model it was sent has {tuple(expected[name].shape)} {expected[name].dtype}")
    return ""


def check_train_reply(node: int, t: int, envelopes: list[dict], reply, sizes: dict[int, int],
                      model: dict[str, torch.Tensor] | None = None) -> str:
    """The reason a node's round reply is refused, or "": ``envelopes`` what the node was sent about each client
    (its ``received``), ``sizes`` {client: training samples}, ``model`` {name: tensor} of the model (the uploads'
    ``params`` are checked against it)."""
    if not isinstance(reply, dict) or not isinstance(reply.get("results"), list) \
            or not isinstance(reply.get("diverged"), dict):
        return f"node {node} sent a round-{t + 1} reply without its results"
    problem = _round(node, t, reply)
    if problem:
        return problem
    sent = {int(e["client_id"]): e for e in envelopes}
    answered = [int(r.get("client_id", -1)) for r in reply["results"]] + [int(i) for i in reply["diverged"]]
    problem = _clients(node, t, list(sent), answered)
    if problem:
        return problem
    for r in reply["results"]:
        client, upload = int(r["client_id"]), r.get("upload")
        if not isinstance(upload, dict):
            return f"node {node}, client {client}, round {t + 1}: no upload"
        for path, tensor in tensors(upload):
            if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                return f"node {node}, client {client}, round {t + 1}: upload '{path}' holds NaN or infinite values"
        if model is not None and isinstance(upload.get("params"), dict):
            problem = _like(node, client, t, "params", upload["params"], model)
            if problem:
                return problem
        n = upload.get("n")
        if n is not None and not (isinstance(n, (int, float)) and 0 <= n <= sizes.get(client, math.inf)):
            return (f"node {node}, client {client}, round {t + 1}: a sample count of {n} (the client holds "
                    f"{sizes.get(client, '?')} training samples)")
        result = r.get("result") or {}
        steps, loss = result.get("steps"), result.get("loss")
        if not isinstance(steps, int) or steps < 0 or not isinstance(loss, (int, float)) or not math.isfinite(loss):
            return f"node {node}, client {client}, round {t + 1}: a training report of {steps} steps and loss {loss}"
    return ""


def check_evaluate_reply(node: int, t: int, envelopes: list[dict], jobs, reply) -> str:
    """The reason a node's evaluation reply is refused, or "": a confusion count per family and client it was sent,
    every count finite and non-negative."""
    if not isinstance(reply, dict) or not isinstance(reply.get("confusions"), dict):
        return f"node {node} sent an evaluation reply without confusion counts"
    problem = _round(node, t, reply)
    if problem:
        return problem
    for family in jobs:
        per_client = reply["confusions"].get(family)
        if not isinstance(per_client, list) or len(per_client) != len(envelopes):
            return f"node {node}: evaluation family '{family}' does not have one entry per client it was sent"
        for envelope, variants in zip(envelopes, per_client):
            for path, tensor in tensors(variants):
                if not bool(torch.isfinite(tensor.double()).all()) or bool((tensor < 0).any()):
                    return (f"node {node}, client {envelope['client_id']}, evaluation after round {t + 1}: confusion "
                            f"counts '{family}.{path}' are negative or not finite")
    return ""
