"""Profiling on a real Dask LocalCluster of 2 worker processes: the merged profile equals the
single-process one bit for bit whatever the number of shards and the kind of data (batches in
memory, files each worker reads, a dask.array), the graph reaches each worker once, and a
worker killed mid-run still gives the exact profile."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from profiles import differences, same

import lowbit
from lowbit.cli.data_files import batch_refs
from lowbit.cli.demo import bundled

SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture(scope="module")
def single(mnist):
    graph, x = mnist
    batches = [{"input": x[i:i + 20]} for i in range(0, 140, 20)]
    return batches, lowbit.profile(graph, batches, progress=False)


@pytest.mark.parametrize("shards", [1, 2, 7])
def test_merged_profiles_equal_the_single_process_one(client, mnist, single, shards, tmp_path):
    graph, _ = mnist
    batches, one = single
    merged = lowbit.profile(graph, batches, client=client, shards=shards, progress=False)
    assert same(merged, one, tmp_path)


def test_files_read_by_the_workers_and_a_dask_array(client, mnist, single, tmp_path):
    import dask.array as da

    graph, x = mnist
    one = single[1]
    folder = tmp_path / "calib"
    folder.mkdir()
    np.save(folder / "a.npy", x[:60])   # batches of 20 never span two files: 60 + 80 rows
    np.save(folder / "b.npy", x[60:140])
    refs = batch_refs(str(folder), graph, batch_size=20)
    assert len(refs) == 7
    from_files = lowbit.profile(graph, refs, client=client, shards=3, progress=False)
    assert same(from_files, one, tmp_path)
    array = da.from_array(x[:140], chunks=30)  # chunks that do not follow the batches
    from_array = lowbit.profile(graph, array, client=client, shards=4, batch_size=20,
                                progress=False)
    assert same(from_array, one, tmp_path)


def _count_graph_loads() -> None:
    """On a worker: count how many Graph objects are unpickled there."""
    import lowbit.ir.graph as module

    module._LOADS = 0

    def setstate(self, state):
        module._LOADS += 1
        self.__dict__.update(state)

    module.Graph.__setstate__ = setstate


def _graph_loads() -> int:
    import lowbit.ir.graph as module

    return module._LOADS


def test_the_graph_reaches_each_worker_once(client, mnist, single, tmp_path):
    graph, _ = mnist
    batches, one = single
    client.run(_count_graph_loads)
    merged = lowbit.profile(graph, batches, client=client, shards=7, progress=False)
    loads = client.run(_graph_loads)
    assert len(loads) == 2 and all(n <= 1 for n in loads.values()), loads
    assert sum(loads.values()) >= 1
    assert same(merged, one, tmp_path)


def test_a_worker_killed_mid_run_still_gives_the_exact_profile(client, mnist, tmp_path):
    graph, x = mnist
    batches = [{"input": x[i:i + 25]} for i in range(0, 350, 25)]
    one = lowbit.profile(graph, batches, progress=False)
    done: dict = {}
    run = threading.Thread(target=lambda: done.update(profile=lowbit.profile(
        graph, batches, client=client, shards=7, progress=False)))
    run.start()
    victim = None
    deadline = time.monotonic() + 300
    while victim is None and run.is_alive() and time.monotonic() < deadline:
        for worker, keys in client.processing().items():
            if any(str(k).startswith("lowbit-profile") for k in keys):
                victim = worker
                break
        time.sleep(0.02)
    assert victim is not None, "no profiling task was seen running"
    pid = client.run(os.getpid, workers=[victim])[victim]
    os.kill(pid, signal.SIGKILL)
    run.join(timeout=900)
    assert not run.is_alive()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert differences(done["profile"], one) == []
    client.wait_for_workers(2, timeout=120)  # the nanny started a new worker


def test_cli_profile_on_a_local_cluster_writes_the_same_file(mnist, tmp_path):
    _, x = mnist
    np.save(tmp_path / "calib.npy", x[:120])
    model = bundled("mnistnet.onnx")
    env = {**os.environ, "PYTHONPATH": SRC}
    outs = []
    for extra in ([], ["--dask", "local:2", "--shards", "5"]):
        out = tmp_path / f"profile{len(extra)}.yaml"
        r = subprocess.run([sys.executable, "-m", "lowbit", "profile", str(model), "--calib",
                            str(tmp_path / "calib.npy"), "--batch-size", "20", "-o", str(out),
                            *extra], capture_output=True, text=True, env=env, timeout=900)
        assert r.returncode == 0, r.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
