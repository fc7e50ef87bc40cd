"""config/warmup.py, what `make serve` does before a worker takes requests: the arbiter imports
the routes and builds the OpenAPI document once, closes its database connections before forking,
and each worker connects every one of its request threads before it accepts."""

import gc
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection, connections

from config import warmup
from quests.api import api

pytestmark = pytest.mark.django_db(transaction=True)


def connected_here() -> tuple[int, bool]:
    return threading.get_ident(), connection.connection is not None


def test_each_request_thread_of_a_worker_is_connected_before_it_takes_requests():
    threads = 3
    with ThreadPoolExecutor(max_workers=threads) as pool:
        warmup.in_worker(pool, threads)
        # Barrier again: each probe runs on a thread of its own, so every thread is seen.
        together = threading.Barrier(threads)

        def probe() -> tuple[int, bool]:
            together.wait(5)
            return connected_here()

        seen = [future.result(10) for future in [pool.submit(probe) for _ in range(threads)]]
        pool.map(lambda _: connections.close_all(), range(threads))
    assert len({ident for ident, _ in seen}) == threads
    assert all(connected for _, connected in seen), seen


def test_without_a_pool_this_thread_is_connected():
    connection.close()
    warmup.in_worker(None, 1)
    assert connection.connection is not None


def test_a_thread_that_cannot_connect_does_not_keep_the_worker_from_serving(caplog):
    # More threads asked for than the pool has: the barrier breaks, each thread says so, and
    # in_worker returns instead of waiting for ever.
    with ThreadPoolExecutor(max_workers=1) as pool:
        warmup.WARM_SECONDS, saved = 0.5, warmup.WARM_SECONDS
        try:
            warmup.in_worker(pool, 2)
        finally:
            warmup.WARM_SECONDS = saved
    assert "was not warmed up" in caplog.text


def test_the_arbiter_builds_the_openapi_document_and_closes_its_connections_before_forking():
    api.__dict__.pop("_openapi_built", None)
    warmup.in_arbiter()
    assert api.__dict__["_openapi_built"]  # built: the workers copy it, never build it
    connection.ensure_connection()
    try:
        warmup.before_fork()
        assert all(connections[alias].connection is None for alias in connections)
        # The loaded application is out of the collector's sight: a worker's full collection
        # scans only what the worker made.
        assert gc.get_freeze_count() > 10_000
    finally:
        gc.unfreeze()
