"""A watchdog that ends the Ray processes of a Flower simulation whose fedlib process was killed (SIGKILL
cannot be handled): ``python -m fedlib.flower.reaper <parent pid> <pid file>``. The parent writes the
processes it started (pid and start time) to the file; when the parent is gone and ``<pid file>.done`` was
never written, the reaper kills those that still run."""
from __future__ import annotations

import os
import sys
import time


def reap(parent: int, pidfile: str, poll_s: float = 0.5) -> int:
    import psutil

    while os.getppid() == parent:
        if os.path.exists(pidfile + ".done"):
            return 0
        time.sleep(poll_s)
    if os.path.exists(pidfile + ".done"):
        return 0
    killed = 0
    try:
        with open(pidfile) as f:
            listed = [line.split() for line in f if line.strip()]
    except OSError:
        return 0
    for pid, started in listed:
        try:
            proc = psutil.Process(int(pid))
            if abs(proc.create_time() - float(started)) < 0.01:   # the same process, not a reused pid
                proc.kill()
                killed += 1
        except (psutil.Error, ValueError):
            continue
    return killed


if __name__ == "__main__":
    reap(int(sys.argv[1]), sys.argv[2])
