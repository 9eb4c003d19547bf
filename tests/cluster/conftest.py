"""A real Dask LocalCluster of 2 worker processes (one thread each), shared by the cluster
tests, and the bundled MNISTNet with its digits."""

from __future__ import annotations

import numpy as np
import pytest

import lowbit
from lowbit.cli.demo import bundled


@pytest.fixture(scope="session")
def client():
    from lowbit.cluster.connect import Cluster

    cluster = Cluster("local:2")
    cluster.client.wait_for_workers(2, timeout=120)
    yield cluster.client
    cluster.close()


@pytest.fixture(scope="session")
def mnist():
    x = np.load(bundled("digits.npz"))["images"]
    return lowbit.load(bundled("mnistnet.onnx")), x
