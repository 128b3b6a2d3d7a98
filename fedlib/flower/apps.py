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
from fedlib.flower.clientapp import client_app
from fedlib.flower.serverapp import server_app

# the entry points a deployment names (deploy/flower/pyproject.toml): the ServerApp lives in ``serverapp``, the
# ClientApp in ``clientapp``, what both agree on in ``messages``
__all__ = ["client_app", "server_app"]
