"""Worker processes: the one way fedlib starts them, for a round's clients (the ``process`` executor) and for
whole runs (the chapters' grids and the ``records`` command).

Workers are spawned (CUDA and forked threads do not mix), start without re-running the user's script, leave
Ctrl-C to the parent and exit when it dies. ``POOLS`` keeps one pool per purpose ("clients", "runs") alive
for reuse while its key stays the same: a notebook running many configurations starts its workers once.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import torch

from fedlib.errors import WorkerDied


def worker_process_setup() -> None:
    """In a worker process: leave Ctrl-C to the parent (it shuts the pool down; a kernel's shutdown
    interrupts its whole process group) and exit if the parent dies."""
    import signal
    import threading
    import time

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


def single_threaded_run_worker() -> None:
    """Initializer of a worker that trains whole runs: one thread, no progress bars."""
    worker_process_setup()
    os.environ["TQDM_DISABLE"] = "1"
    torch.set_num_threads(1)


@contextlib.contextmanager
def main_script_hidden(hide: bool):
    """Start workers without re-running the user's script (spawned children import ``__main__``
    from its file otherwise, which needs an ``if __name__ == "__main__"`` guard). Kept visible when the
    method itself is defined in the script: workers must import it then."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not hide or main is None or path is None or getattr(main, "__spec__", None) is not None:
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path


def _ready() -> bool:
    return True


# resident memory of one worker process (PyTorch, the dataset in shared memory, a model, its batches): measured
# on the CPU at about 0.75 GB; a worker needs this much free before it is started
WORKER_BYTES = int(0.75 * 2**30)


def available_memory() -> int:
    """Bytes the kernel can still hand out (MemAvailable), or the physical memory where it does not say."""
    try:
        with open("/proc/meminfo") as f:
            info = {line.split(":")[0]: line.split()[1] for line in f}
        return int(info["MemAvailable"]) * 1024
    except (OSError, KeyError, ValueError, IndexError):
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def bounded_workers(requested: int, work: int, what: str = "worker processes") -> int:
    """How many worker processes to start for ``work`` tasks (clients of a round, runs of a grid): at most
    ``requested``, the cores this process may use, the tasks, and what free memory holds at ``WORKER_BYTES``
    each; a cut below ``requested`` is said in one line on stderr with the figures."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    free = available_memory()
    fit = max(1, free // WORKER_BYTES)
    n = max(1, min(requested, cores, max(work, 1), fit))
    if n < requested:
        print(f"fedlib: {requested} {what} asked for, {n} started ({cores} cores, {work} task(s) to share, "
              f"{free / 2**30:.1f} GiB free at about {WORKER_BYTES / 2**30:.2f} GiB each)", file=sys.stderr)
    return n


def start_pool(workers: int, initializer: Callable, initargs: tuple = (), hide_main: bool = True,
               what: str = "worker processes") -> ProcessPoolExecutor:
    """A pool of ``workers`` spawned processes, every one started (and its initializer run) before it returns."""
    pool = ProcessPoolExecutor(workers, mp_context=torch.multiprocessing.get_context("spawn"),
                               initializer=initializer, initargs=initargs)
    with main_script_hidden(hide_main):
        try:
            for f in [pool.submit(_ready) for _ in range(workers)]:
                f.result()
        except BrokenProcessPool as exc:
            pool.shutdown(wait=False, cancel_futures=True)
            raise WorkerDied(f"could not start the {what}: a worker process died as it started (killed, out of "
                             "memory, or a script that defines its own method and does not run under "
                             "`if __name__ == '__main__':`)") from exc
    return pool


def worker_died(what: str) -> WorkerDied:
    """The one-line error for a pool whose worker process was killed while it worked."""
    return WorkerDied(f"a worker process of the {what} died (killed, or out of memory); run again with one "
                      "worker (--workers 1, or --executor sequential) to see the error")


def process_state(pid: int) -> str | None:
    """The state letter of ``/proc/<pid>/stat`` (R running, S sleeping, T stopped, ...), None where it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[0]


def completed(futures, purpose: str, what: str, poll_s: float = 2.0):
    """The ``futures`` of the cached pool ``purpose`` as they finish. A worker that is stopped (SIGSTOP, Ctrl-Z in
    its terminal) would keep the wait going forever: the pool is dropped with its processes killed, and the wait
    ends in one line naming the process."""
    from concurrent.futures import FIRST_COMPLETED, wait

    pending = set(futures)
    while pending:
        done, pending = wait(pending, timeout=poll_s, return_when=FIRST_COMPLETED)
        yield from done
        if not done and purpose in POOLS.pools:
            pool = POOLS.pools[purpose][1]
            stopped = [p.pid for p in list((getattr(pool, "_processes", None) or {}).values())
                       if process_state(p.pid) in ("T", "t")]
            if stopped:
                POOLS.shutdown(purpose, kill=True)
                raise WorkerDied(f"worker process {stopped[0]} of the {what} was stopped (SIGSTOP or Ctrl-Z), so "
                                 "the run could not go on; its pool is ended: run the same command again to resume")


@contextlib.contextmanager
def collecting(futures, purpose: str, what: str):
    """Around the wait for ``futures`` of the cached pool ``purpose``: a dead worker drops the pool and raises
    ``worker_died(what)`` in one line; any other exit (an error, Ctrl-C) cancels the futures not started."""
    try:
        yield
    except BrokenProcessPool:
        POOLS.shutdown(purpose)
        raise worker_died(what) from None
    except BaseException:
        for f in futures:
            f.cancel()
        raise


def stop_pool(pool: ProcessPoolExecutor, kill: bool = False, grace_s: float = 30.0) -> None:
    """Shut a pool down; ``kill``: stop processes still busy instead of waiting for them. A stopped worker
    (SIGSTOP, Ctrl-Z) never takes its exit sentinel, so waiting for it would hang the interpreter's exit: a pool
    holding one is killed, and a worker still alive ``grace_s`` after the pool was told to stop (stopped after the
    check, or hung) is killed then."""
    import time

    processes = list((getattr(pool, "_processes", None) or {}).values())
    kill = kill or any(process_state(p.pid) in ("T", "t") for p in processes)
    if kill:
        for proc in processes:
            proc.kill()
    pool.shutdown(wait=False, cancel_futures=True)
    deadline = time.monotonic() + (1.0 if kill else grace_s)
    for proc in processes:
        proc.join(timeout=max(0.0, deadline - time.monotonic()))
    for proc in processes:
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=5.0)


class PoolCache:
    """One pool per purpose, reused while its key stays the same (``keep``: objects the workers share
    memory with, held alive as long as the pool)."""

    def __init__(self):
        self.pools: dict[str, tuple] = {}   # purpose -> (key, pool, keep)
        atexit.register(self.shutdown)

    def get(self, purpose: str, key, make: Callable[[], ProcessPoolExecutor], keep=None) -> ProcessPoolExecutor:
        if purpose in self.pools and self.pools[purpose][0] != key:
            self.shutdown(purpose)
        if purpose not in self.pools:
            self.pools[purpose] = (key, make(), keep)
        return self.pools[purpose][1]

    def shutdown(self, purpose: str | None = None, kill: bool = False) -> None:
        for name in [purpose] if purpose is not None else list(self.pools):
            if name in self.pools:
                stop_pool(self.pools.pop(name)[1], kill=kill)


POOLS = PoolCache()
