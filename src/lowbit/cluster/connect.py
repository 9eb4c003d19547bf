"""Connecting to a Dask cluster: a scheduler's address, or `local:N` for a cluster of N worker
processes on this machine (one thread each: lowbit's kernels are numpy, and one BLAS thread per
process is what keeps two processes on two cores from fighting)."""

from __future__ import annotations

from typing import Any

from lowbit.errors import InputError, UnsupportedError

LOCAL = "local:"


def distributed() -> Any:
    """The `distributed` module, or UnsupportedError saying how to install it."""
    try:
        import distributed as dist
    except ImportError:
        raise UnsupportedError("running on a Dask cluster needs dask.distributed: "
                               "pip install 'dask[distributed]'") from None
    return dist


class Cluster:
    """A Dask client for `address` ("local:N" or a scheduler address), and the local cluster
    it started, closed with it (`with Cluster("local:2") as client: ...`)."""

    def __init__(self, address: str, *, timeout: float = 30.0) -> None:
        dist = distributed()
        self.address = address
        self.cluster: Any = None
        if address.startswith(LOCAL):
            count = address[len(LOCAL):]
            if not count.isdigit() or int(count) < 1:
                raise InputError(f"--dask {address!r}: write local:N with N workers, N >= 1 "
                                 f"(e.g. local:2)")
            self.cluster = dist.LocalCluster(n_workers=int(count), threads_per_worker=1,
                                             processes=True, dashboard_address=None,
                                             silence_logs=40)
            self.client = dist.Client(self.cluster)
            return
        try:
            self.client = dist.Client(address, timeout=timeout)
        except (OSError, TimeoutError) as exc:
            raise InputError(f"cannot reach the Dask scheduler at {address!r} ({exc}); start "
                             f"one with `dask scheduler` (docs/distributed.md) or use "
                             f"--dask local:N") from None

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()

    def __enter__(self) -> Any:
        return self.client

    def __exit__(self, *exc: object) -> None:
        self.close()


def workers(client: Any) -> int:
    """How many workers the client's cluster has now (at least 1)."""
    return max(1, len(client.scheduler_info().get("workers", {})))
