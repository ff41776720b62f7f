"""Worker processes that a Ctrl-C stops cleanly: the timing prefetch of a network's run and
the tuner's measurements.

A Ctrl-C is the parent's to handle. The workers ignore SIGINT (on a terminal it reaches the
whole process group, and a worker's KeyboardInterrupt would only print a traceback), the
parent stops them with :func:`stop_pool` when it winds down, and a worker whose parent died
anyway is ended by the kernel (``PR_SET_PDEATHSIG`` on Linux) instead of waiting forever on
its task queue, holding its parent's stderr open. A SIGINT while the parent forks them is
held back until the pool is recorded (:func:`sigint_deferred`): delivered inside the fork,
Python drops the KeyboardInterrupt ("Exception ignored in ... _releaseLock") and the command
runs on; and a worker the parent has not recorded yet cannot be stopped.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import multiprocessing
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["PoolHandle", "forked_pool", "sigint_deferred", "stop_pool", "submit_forked",
           "worker_init"]

_PR_SET_PDEATHSIG = 1


def worker_init() -> None:
    """Initializer of a worker process: ignore SIGINT, and end with the parent (Linux)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))


@contextlib.contextmanager
def sigint_deferred() -> Iterator[None]:
    """Hold SIGINT back while the block runs (it forks workers and records them); a Ctrl-C
    in between is delivered, as a KeyboardInterrupt, when the block ends."""
    if threading.current_thread() is not threading.main_thread() or \
            not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@dataclass
class PoolHandle:
    """What :func:`stop_pool` needs of a pool, taken while the pool has it (a pool forgets
    its processes and queues when it is shut down)."""

    pool: concurrent.futures.ProcessPoolExecutor
    processes: list[Any]
    results: Any
    manager: threading.Thread | None = None

    @classmethod
    def of(cls, pool: concurrent.futures.ProcessPoolExecutor) -> PoolHandle:
        # No public handle on these: ProcessPoolExecutor's own attributes (CPython 3.10+).
        return cls(pool, list((getattr(pool, "_processes", None) or {}).values()),
                   getattr(pool, "_result_queue", None),
                   getattr(pool, "_executor_manager_thread", None))


def stop_pool(handle: PoolHandle | concurrent.futures.ProcessPoolExecutor) -> None:
    """Stop a pool at once: cancel the work not started and end its worker processes, which
    would otherwise finish what they hold first (and the interpreter's exit would wait for
    them)."""
    if not isinstance(handle, PoolHandle):
        handle = PoolHandle.of(handle)
    handle.pool.shutdown(wait=False, cancel_futures=True)
    for process in handle.processes:
        process.terminate()
    for process in handle.processes:
        process.join(timeout=10)
    # A worker ended while it sent a result leaves the pool's manager thread waiting for the
    # rest of the message (the parent holds the pipe's write end too, so no end of file), and
    # the interpreter's exit waiting for that thread. With the workers gone, closing the
    # parent's write end ends the wait: the pool winds down as broken.
    writer = getattr(handle.results, "_writer", None)
    if writer is not None:
        with contextlib.suppress(OSError):
            writer.close()
    # The manager thread then closes its wake-up pipe, and the interpreter's exit hook
    # (concurrent.futures' _python_exit) writes to that pipe unless it saw it closed: were the
    # thread still winding down at exit, the hook could write to the pipe just closed and
    # print an OSError traceback ("Bad file descriptor"). Wait for the thread here.
    manager = handle.manager or getattr(handle.pool, "_executor_manager_thread", None)
    if manager is not None and manager is not threading.current_thread():
        manager.join(timeout=10)


_FORKED: list[Callable[[], Any]] = []
"""The calls of the worker :func:`submit_forked` forks last, by position: the worker inherits
them with the rest of the parent's memory, and a task names its call by index."""


def _call_forked(index: int) -> Any:
    return _FORKED[index]()


def forked_pool() -> concurrent.futures.ProcessPoolExecutor | None:
    """A pool of one worker process, forked at its first submit (:func:`worker_init` in
    it), or None where no worker can be forked (no ``fork`` start method, or a daemonic
    process: a pool or Dask worker may have no children). Create it and submit to it inside
    :func:`sigint_deferred`, and record its :class:`PoolHandle` there."""
    if multiprocessing.current_process().daemon:
        return None
    try:
        context = multiprocessing.get_context("fork")
    except ValueError:
        return None
    return concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=context,
                                                  initializer=worker_init)


def submit_forked(calls: Sequence[Callable[[], Any]]
                  ) -> tuple[PoolHandle, list[concurrent.futures.Future[Any]]] | None:
    """Run ``calls`` in order in one forked worker process; its handle (for
    :func:`stop_pool`) and a future per call, or None where no worker can be forked (no
    ``fork`` start method, or a daemonic process: a pool or Dask worker may have no children).

    The worker is forked at the first submit and inherits the calls, so neither they nor
    what they reach are pickled (a network's programs or its trace would cost the parent as
    much to pickle as to use); only their results come back pickled. The pool is shut down
    at once: it ends when the last call has run, or when :func:`stop_pool` stops it."""
    with sigint_deferred():  # the worker is forked at the first submit: record it first
        pool = forked_pool()
        if pool is None:
            return None
        _FORKED[:] = calls
        futures = [pool.submit(_call_forked, index) for index in range(len(calls))]
        handle = PoolHandle.of(pool)
        pool.shutdown(wait=False)
    return handle, futures
