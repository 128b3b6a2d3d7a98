"""fedlib on Flower (the optional extra ``flower``: ``pip install -e '.[flower]'``).

``simulate(cfg)`` runs a config through Flower's simulation runtime (Ray backend) on this machine;
``fedlib.flower.apps:server_app`` and ``fedlib.flower.apps:client_app`` are the apps a deployment
(SuperLink + SuperNodes on several machines) runs with ``flwr run``; see the book's Flower page.
"""
from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path

os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")   # no stack dump on SIGTERM: fedlib handles it

from fedlib.errors import ClientFailed
from fedlib.flower.clientapp import client_app
from fedlib.flower.serverapp import STOP, FlowerExecutor, make_server_app, server_app
from fedlib.store import atomic_text


def _children() -> list:
    import psutil

    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


@contextmanager
def stoppable():
    """Ctrl-C and SIGTERM stop a simulation cleanly: the first sets ``STOP`` (the ServerApp's thread leaves at
    its next poll, Flower's runtime and Ray shut down, then KeyboardInterrupt: the caller's resume message);
    a second one interrupts at once. A watchdog process ends the Ray processes if this process is killed."""
    STOP.clear()
    main = threading.current_thread() is threading.main_thread()
    previous = {}

    def on_signal(signum, frame):
        if STOP.is_set():
            raise KeyboardInterrupt
        STOP.set()
        print(f"fedlib: {signal.Signals(signum).name}: stopping the Flower run after the current poll "
              "(again to stop at once)", file=sys.stderr)

    import ray._private.utils as ray_utils

    ray_sigterm = ray_utils.set_sigterm_handler
    if main:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, on_signal)
        ray_utils.set_sigterm_handler = lambda handler: None   # ray.init would replace ours with sys.exit
    folder = tempfile.mkdtemp(prefix="fedlib-flower-")
    pidfile = os.path.join(folder, "pids")
    reaper = subprocess.Popen([sys.executable, "-m", "fedlib.flower.reaper", str(os.getpid()), pidfile],
                              stdin=subprocess.DEVNULL, start_new_session=True)
    done = threading.Event()

    def list_children():   # what the reaper would end: every process this one started (Ray's), every 2 s
        while not done.wait(2.0):
            kids = [p for p in _children() if p.pid != reaper.pid]
            try:
                atomic_text(Path(pidfile), "".join(f"{p.pid} {p.create_time()}\n" for p in kids))
            except Exception:   # a process that ended between listing and reading its start time
                continue

    lister = threading.Thread(target=list_children, daemon=True)
    lister.start()
    try:
        yield
    finally:
        done.set()
        for p in _children():   # anything of the runtime still alive after its shutdown (a stopped run)
            if p.pid != reaper.pid:
                try:
                    p.kill()
                except Exception:   # it ended by itself meanwhile
                    pass
        open(pidfile + ".done", "w").close()
        reaper.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)   # the pid list is only the watchdog's
        ray_utils.set_sigterm_handler = ray_sigterm
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def simulate(cfg, *, checkpoint=None, progress: bool = False, desc: str = "", callbacks=(), nodes: int | None = None,
             cpus: int | None = None, timeout: float | None = 600.0, verbose: bool = False, client=None):
    """Run ``cfg`` with its clients on ``nodes`` virtual Flower nodes (default: one per client; node p of n
    holds the clients i with i mod n = p, their data, models and private state) executed by a Ray cluster of
    ``cpus`` CPUs (default: all), one CPU per node at a time; returns the Federation.

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
        with stoppable():
            run_simulation(server_app=server, client_app=client or client_app, num_supernodes=nodes,
                           backend_name="ray", backend_config=backend, verbose_logging=verbose)
            if STOP.is_set():
                raise KeyboardInterrupt
    finally:
        flwr_logger.setLevel(level)
    if "error" in sink:
        raise sink["error"]
    if "federation" not in sink:
        raise ClientFailed("the Flower simulation ended without running the experiment (see Flower's log above)")
    return sink["federation"]


__all__ = ["ClientFailed", "FlowerExecutor", "client_app", "server_app", "simulate"]
