"""A local cluster of a test's or a benchmark's own: started, then stopped and its folder removed."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager

from localcluster import ClusterConfig, LocalCluster


@contextmanager
def own_cluster(config: ClusterConfig) -> Iterator[LocalCluster]:
    """Start a cluster for `config`; stop it and remove its folder however the block ends."""
    cluster = LocalCluster(config)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(cluster.dir, ignore_errors=True)
