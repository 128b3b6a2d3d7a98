"""fedlib on Flower (the optional extra ``flower``: ``pip install -e '.[flower]'``).

``simulate(cfg)`` runs a config through Flower's simulation runtime (Ray backend) on this machine;
``fedlib.flower.apps:server_app`` and ``fedlib.flower.apps:client_app`` are the apps a deployment
(SuperLink + SuperNodes on several machines) runs with ``flwr run``; see the book's Flower page.
"""
from __future__ import annotations

import logging
import os

os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")

from fedlib.flower.apps import ClientFailed, FlowerExecutor, client_app, make_server_app, server_app


def simulate(cfg, *, checkpoint=None, progress: bool = False, desc: str = "", callbacks=(), nodes: int | None = None,
             cpus: int | None = None, timeout: float | None = 600.0, verbose: bool = False, client=None):
    """Run ``cfg`` with its clients on ``nodes`` virtual Flower nodes (default: one per client) executed by
    a Ray cluster of ``cpus`` CPUs (default: all), one CPU per client at a time; returns the Federation.

    ``timeout``: seconds a round's clients may take before the run stops with ``ClientFailed``.
    ``client``: a ClientApp to use instead of fedlib's (e.g. one with Flower mods around ``apps.train``).
    Ray is started and shut down by this call."""
    from flwr.simulation import run_simulation

    cpus = cpus or os.cpu_count() or 1
    sink: dict = {}
    nodes = nodes or cfg.num_clients
    server = make_server_app(cfg, sink, checkpoint=checkpoint, progress=progress, desc=desc, timeout=timeout,
                             callbacks=callbacks, min_nodes=nodes)   # every virtual node registered first
    backend: dict = {"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
               "init_args": {"num_cpus": cpus, "include_dashboard": False, "log_to_driver": verbose,
                             "logging_level": logging.INFO if verbose else logging.ERROR},
               "actor": {"tensorflow": 0}}
    flwr_logger = logging.getLogger("flwr")
    level = flwr_logger.level
    if not verbose:
        flwr_logger.setLevel(logging.ERROR)
    try:
        run_simulation(server_app=server, client_app=client or client_app, num_supernodes=nodes,
                       backend_name="ray", backend_config=backend, verbose_logging=verbose)
    finally:
        flwr_logger.setLevel(level)
    if "error" in sink:
        raise sink["error"]
    if "federation" not in sink:
        raise ClientFailed("the Flower simulation ended without running the experiment (see Flower's log above)")
    return sink["federation"]


__all__ = ["ClientFailed", "FlowerExecutor", "client_app", "server_app", "simulate"]
