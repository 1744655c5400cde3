"""Run many simulations: a driver that feeds one of three backends and keeps the store.

- ``inline``: the current process, one run at a time (``workers=1``; tests, notebooks).
- ``local``: a ``concurrent.futures.ProcessPoolExecutor`` with the ``spawn`` start method (the
  worker is a top-level function of plain values, so it is spawn-safe on every platform).
- ``ray``: ``@ray.remote`` tasks on ``ray.init(address=...)`` or on a local Ray started here.
  Workers return values; only the driver writes the store, so a cluster needs no shared disk
  (workers do need this package installed, or a ``runtime_env``).

Callers hand the driver *tasks*: generators that yield config dicts and receive each run's
result (``{"key", "status": "ok"|"error", "summary", "error"}``), and return their own answer.
A sweep's task yields one config; a capacity search yields one probe after another. The driver
resolves each config, answers from the store when the run is already there (reused), merges
identical runs in flight, and otherwise submits it (run); failed runs are stored with their
error and do not stop the others.
"""
from __future__ import annotations

import sys
import traceback
from collections import deque
from collections.abc import Generator
from dataclasses import dataclass, field

from sim.sweep.store import RunStore, config_key, resolve

Task = Generator[dict, dict, object]


def execute(config: dict) -> dict:
    """Run one resolved config (in a worker). Returns plain values only; the run's warnings go
    back with it (the driver says each once, on the command line's one-line channel) instead of
    being printed by the worker with its source path."""
    import warnings

    from sim.errors import ServesimWarning

    try:
        from sim.api import simulate

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ServesimWarning)  # listed in the summary: the driver says them
            res = simulate(config, plots=False, progress=False)
        done = res.requests[res.requests["status"] == "finished"]
        lat = {c: done[c].to_numpy() for c in ("ttft_s", "tpot_s", "e2e_s")}
        return {"status": "ok", "summary": res.summary, "error": None, "latency": lat}
    except Exception as e:  # recorded, never fatal to the sweep
        msg = f"{type(e).__name__}: {e}\n\n{traceback.format_exc()}"
        return {"status": "error", "summary": None, "error": msg, "latency": None}


# ------------------------------------------------------------------------------- backends


class InlineBackend:
    def __init__(self):
        self._done: deque = deque()

    def submit(self, key: str, config: dict) -> None:
        self._done.append((key, execute(config)))

    def next_done(self) -> tuple[str, dict]:
        return self._done.popleft()

    def close(self) -> None:
        pass

    def kill(self) -> None:
        pass


PARENT_POLL_S = 0.5
"""How often a worker checks that its driver is alive (the portable half of the parent-death check)."""


def _worker_init(parent_pid: int) -> None:
    """Runs first in every pool worker. The worker ignores Ctrl-C (the driver handles it and
    terminates the pool) and dies with the driver even when the driver is SIGKILLed: on Linux
    the kernel sends it SIGKILL (``prctl(PR_SET_PDEATHSIG)``); everywhere a daemon thread
    polls the parent pid and exits once the driver is gone."""
    import os
    import signal
    import threading
    import time

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:  # the driver died before this worker started
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(PARENT_POLL_S)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, name="servesim-parent-watch", daemon=True).start()


class LocalBackend:
    def __init__(self, workers: int):
        import multiprocessing
        import os
        from concurrent.futures import ProcessPoolExecutor

        self.pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                        initializer=_worker_init, initargs=(os.getpid(),))
        self.futures: dict = {}

    def submit(self, key: str, config: dict) -> None:
        self.futures[self.pool.submit(execute, config)] = key

    def next_done(self) -> tuple[str, dict]:
        from concurrent.futures import FIRST_COMPLETED, wait

        done, _ = wait(list(self.futures), return_when=FIRST_COMPLETED)
        fut = next(iter(done))
        key = self.futures.pop(fut)
        try:
            return key, fut.result()
        except Exception as e:  # a worker process died (killed, out of memory)
            return key, {"status": "error", "summary": None, "error": f"worker failed: {type(e).__name__}: {e}",
                         "latency": None}

    def close(self) -> None:
        for f in self.futures:
            f.cancel()
        self.pool.shutdown(wait=True, cancel_futures=True)

    def kill(self) -> None:
        """Interrupted: terminate the workers now (their runs are lost; finished ones are stored)."""
        # no future is cancelled here: the pool's manager thread marks them all broken once the
        # workers are gone (cancelling first makes that thread raise InvalidStateError)
        procs = list((getattr(self.pool, "_processes", None) or {}).values())
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
        # the pool's manager thread sees its workers gone, marks the futures broken and exits;
        # joining it here (quick: nothing is left to wait for) keeps the interpreter's exit hook
        # from waking a thread whose pipe is already closed
        self.pool.shutdown(wait=True)


class RayBackend:
    def __init__(self, workers: int, address: str | None):
        try:
            import ray
        except ImportError:
            from sim.errors import ServesimError

            raise ServesimError("--backend ray needs Ray: pip install -e '.[ray]' in the servesim checkout") from None
        self.ray = ray
        if not ray.is_initialized():
            if address:
                ray.init(address=address, log_to_driver=False)
            else:
                ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
        self.remote = ray.remote(num_cpus=1)(execute)
        self.refs: dict = {}

    def submit(self, key: str, config: dict) -> None:
        self.refs[self.remote.remote(config)] = key

    def next_done(self) -> tuple[str, dict]:
        (ref,), _ = self.ray.wait(list(self.refs), num_returns=1)
        key = self.refs.pop(ref)
        try:
            return key, self.ray.get(ref)
        except Exception as e:  # the task or its worker died
            return key, {"status": "error", "summary": None, "error": f"ray task failed: {e}", "latency": None}

    def close(self) -> None:
        for ref in self.refs:
            self.ray.cancel(ref)

    def kill(self) -> None:
        for ref in self.refs:
            self.ray.cancel(ref, force=True)


def make_backend(backend: str = "local", workers: int = 1, address: str | None = None):
    if backend == "ray":
        return RayBackend(workers, address)
    if backend != "local":
        from sim.errors import ServesimError

        raise ServesimError(f"unknown backend {backend!r} (local or ray)")
    return InlineBackend() if workers <= 1 else LocalBackend(workers)


# ------------------------------------------------------------------------------- driver


@dataclass
class Counts:
    reused: int = 0
    run: int = 0
    failed: int = 0
    keys: list = field(default_factory=list)

    def line(self) -> str:
        return f"{self.reused} reused, {self.run} run, {self.failed} failed"


class Driver:
    """Runs tasks to completion over a backend, through the store."""

    def __init__(self, store: RunStore, backend="local", workers: int = 1, address: str | None = None,
                 progress: bool | None = None, desc: str = "runs", total: int | None = None):
        self.store = store
        self.backend_spec = (backend, workers, address)
        self.counts = Counts()
        from sim.progress import auto_mode

        self.progress = auto_mode(progress)  # a bar on a terminal, a line every 30 s off it, or nothing
        self.desc, self.total = desc, total
        self.warned: set = set()  # the kinds of run warnings already said

    def run(self, tasks: dict[object, Task]) -> dict:
        backend = make_backend(*self.backend_spec)
        results: dict = {}
        inflight: dict[str, list] = {}
        configs: dict[str, dict] = {}
        bar = None
        if self.progress:
            from sim.progress import Progress

            bar = Progress(self.total, self.desc, "run", self.progress)

        def advance(name, value) -> None:
            gen = tasks[name]
            while True:
                try:
                    cfg = gen.send(value)
                except StopIteration as stop:
                    results[name] = stop.value
                    return
                try:
                    resolved = resolve(cfg)
                except Exception as e:  # an invalid config is a failed run, not a crash
                    resolved = cfg
                    key = config_key(cfg)
                    value = {"key": key, "status": "error", "summary": None, "error": f"{type(e).__name__}: {e}"}
                    self._record(key, resolved, value, bar)
                    continue
                key = config_key(resolved)
                hit = self.store.get(key)
                if hit is not None:
                    self.counts.reused += 1
                    self.counts.keys.append(key)
                    if bar is not None:
                        _tick(bar)
                    value = hit
                    continue
                if key in inflight:  # the same run is already under way: share its result
                    inflight[key].append(name)
                    self.counts.reused += 1
                    return
                inflight[key] = [name]
                configs[key] = resolved
                backend.submit(key, resolved)
                return

        try:
            for name in list(tasks):
                advance(name, None)
            while inflight:
                key, result = backend.next_done()
                result = {"key": key, **result}
                self._record(key, configs.pop(key), result, bar)
                result.pop("latency", None)
                for name in inflight.pop(key):
                    advance(name, result)
        except BaseException:  # Ctrl-C, SIGTERM or an error: the workers must not outlive us
            backend.kill()
            raise
        else:
            backend.close()
        finally:
            if bar is not None:
                bar.close()
        return results

    def _record(self, key: str, config: dict, result: dict, bar) -> None:
        self._warn(result)
        self.store.put(key, config, result)
        self.counts.keys.append(key)
        if result["status"] == "ok":
            self.counts.run += 1
        else:
            self.counts.failed += 1
        if bar is not None:
            _tick(bar)


    def _warn(self, result: dict) -> None:
        """Each kind of warning of the runs once (kinds differ in more than their counts: "1 of
        50 requests clipped" and "3 of 80 requests clipped" are one kind), as ``ServesimWarning``."""
        import re
        import warnings

        from sim.errors import ServesimWarning

        for text in (result.get("summary") or {}).get("warnings") or []:
            kind = re.sub(r"\d[\d,.]*", "N", text)
            if kind not in self.warned:
                self.warned.add(kind)
                warnings.warn(f"{text} (first of the {self.desc} that warn so; each run's summary lists its own)",
                              ServesimWarning, stacklevel=2)


def _tick(bar) -> None:
    """One run done (``sim.progress.Progress`` grows an estimated total the runs outnumber)."""
    bar.update(1)


def one_run(config: dict) -> Task:
    """The task of a single run: yields its config, returns its result."""
    result = yield config
    return result
