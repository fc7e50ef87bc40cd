"""A thread a test starts closes the database connections it opened when it ends, with a warning.

Django opens a connection per thread and keeps it (CONN_MAX_AGE) until someone closes it; a thread
that ends without `connection.close()` leaves a PostgreSQL session behind until the garbage
collector finds it. Such a session can stay in a transaction holding row or table locks, and the
emptying after the next transactional test (tests/emptying.py), or the drop of the test database at
the end, then waits on it until the statement timeout. So every thread's run is wrapped: what it
left open is closed as it ends, and a ThreadConnectionWarning names the thread, so that the test
can be made to close it itself.
"""

import threading
import warnings
from collections.abc import Callable

from django.db import connection, connections


class ThreadConnectionWarning(ResourceWarning):
    """A thread ended with database connections open; they were closed for it."""


def install() -> None:
    run = threading.Thread.run
    if getattr(run, "closes_connections", False):
        return

    def run_and_close(self: threading.Thread) -> None:
        # The target is read before run() drops it (Thread.run deletes _target when it ends).
        target = getattr(self, "_target", None)
        try:
            run(self)
        finally:
            left_open = [connection.alias for connection in connections.all(initialized_only=True) if connection.connection is not None]
            if left_open:
                connections.close_all()
                warnings.warn(
                    ThreadConnectionWarning(
                        f"thread {self.name} ({getattr(target, '__qualname__', target)!s}) ended with its database connection "
                        f"open ({', '.join(left_open)}); it was closed for it: close it at the end of the thread"
                    ),
                    stacklevel=1,
                )

    run_and_close.closes_connections = True  # type: ignore[attr-defined]
    threading.Thread.run = run_and_close  # type: ignore[method-assign]


def reporting(failures: list[BaseException], body: Callable[[], None]) -> Callable[[], None]:
    """A thread's target that runs `body`, keeps what it raised in `failures` (an exception in a
    thread is otherwise only printed: the test asserts on the list) and closes the thread's
    database connection as it ends."""

    def target() -> None:
        try:
            body()
        except BaseException as exc:  # noqa: BLE001 - reported to the test through `failures`
            failures.append(exc)
        finally:
            connection.close()

    return target
