"""Django's PostgreSQL backend, with a health check that a connection in steady use skips.

Django's health check (CONN_HEALTH_CHECKS) sends `SELECT 1` at the start of every request and
task that uses a persistent connection: one more round trip on every agent call, under load the
price of a second statement. A connection that finished a request without error less than
QUESTLOG_DB_HEALTH_CHECK_WINDOW seconds ago (0.5 by default; 0 checks every time) is taken as
healthy, as connection pools do (HikariCP's aliveBypassWindowMs, 500 ms by default). What is
given up: a connection the server closed inside that window fails the one request that uses it
(an agent gets 503 `unavailable`, which it retries), and Django closes it at that request's end
(`close_if_unusable_or_obsolete` checks a connection that saw an error). A connection idle for
longer, such as every connection after a server restart that took more than the window, is
checked as before."""

import time

from django.db.backends.postgresql import base


class DatabaseWrapper(base.DatabaseWrapper):
    # When this connection last ended a request or task without error (time.monotonic()).
    answered_at: float | None = None
    # Django's own, set in connect(); django-stubs does not declare them.
    health_check_enabled: bool
    health_check_done: bool

    def close_if_health_check_failed(self) -> None:
        window = self.settings_dict.get("HEALTH_CHECK_WINDOW", 0)
        if (
            self.connection is not None
            and self.health_check_enabled
            and not self.health_check_done
            and self.answered_at is not None
            and time.monotonic() - self.answered_at < window
        ):
            self.health_check_done = True
            return
        super().close_if_health_check_failed()

    def close_if_unusable_or_obsolete(self) -> None:
        # Django calls this as a request or task starts and as it ends (close_old_connections).
        # Only the end follows a use: a cursor made since the last call has set health_check_done,
        # which the call resets. A connection that saw an error is checked here and closed if
        # unusable; one that is still open after that has answered.
        used = self.health_check_done
        super().close_if_unusable_or_obsolete()
        if used and self.connection is not None:
            self.answered_at = time.monotonic()

    def close(self) -> None:
        super().close()
        self.answered_at = None
