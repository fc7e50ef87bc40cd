"""What every benchmark needs: Django on PostgreSQL in a database of its own, the data it builds
(and removes again), an agent state shaped like a real one, and the way figures are printed.

A benchmark script imports this module first (bench/ is on sys.path when a script runs) and calls
`setup()` before it imports anything from Django or the project."""

import os
import random
import secrets
import statistics
import string
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
BENCH_DATABASE_URL = "postgres://questlog:questlog@127.0.0.1:5432/questlog_bench"
# Every user a benchmark creates starts with this, so a run can find and remove what an earlier,
# interrupted run of the same script left behind without touching anything else in the database
# (another script's run included: two benchmarks may share the database).
_script = Path(sys.argv[0]).stem if sys.argv and sys.argv[0] not in ("", "-c") else "adhoc"
USER_PREFIX = f"bench_{_script.removeprefix('bench_')}_"


def setup() -> None:
    """Configure and start Django against the benchmark database, creating and migrating it."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("DATABASE_URL", BENCH_DATABASE_URL)
    # DEBUG keeps every query in memory and is not how the service runs in production.
    os.environ.setdefault("DJANGO_DEBUG", "0")
    # ...which needs a secret key: a throwaway one, as nothing a benchmark signs outlives its run.
    os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
    # Snapshot requests may publish to the broker; an in-process broker keeps figures free of
    # network waits and leaves no messages behind for a worker that runs later.
    os.environ.setdefault("CELERY_BROKER_URL", "memory://localhost/")
    _ensure_database(os.environ["DATABASE_URL"])

    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0, interactive=False)


def _ensure_database(url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("postgres", "postgresql", "pgsql"):
        sys.exit(f"The benchmarks measure PostgreSQL; DATABASE_URL is {parts.scheme}://…")
    import psycopg
    from psycopg import sql

    name = parts.path.lstrip("/")
    maintenance = urlunsplit(parts._replace(scheme="postgresql", path="/postgres"))
    try:
        with psycopg.connect(maintenance, autocommit=True, connect_timeout=5) as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is None:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
                print(f"created database {name}")
    except psycopg.OperationalError as exc:
        sys.exit(f"Cannot reach PostgreSQL at {parts.hostname}:{parts.port or 5432} ({exc}). Is it running?")


# ---- data --------------------------------------------------------------------------------------


def remove_bench_data() -> None:
    """Remove every object this script's benchmark users own, and the blobs that only they used."""
    from django.contrib.auth import get_user_model

    from checkpoints.models import Checkpoint
    from checkpoints.pruning import blobs_collect_garbage
    from quests.models import AuditEvent, Mission

    users = get_user_model().objects.filter(username__startswith=USER_PREFIX)
    missions = Mission.objects.filter(owner__in=users)
    blobs = _blobs_of(list(missions.values_list("pk", flat=True)))
    AuditEvent.objects.filter(mission__in=missions).delete()
    AuditEvent.objects.filter(actor_user__in=users).delete()
    # Unhook the checkpoint tree first, so the deletion is a few set-wise statements rather
    # than one SET NULL per checkpoint of a long history.
    missions.update(head_checkpoint=None, last_verified_checkpoint=None)
    Checkpoint.objects.filter(mission__in=missions).update(parent=None)
    Checkpoint.objects.filter(mission__in=missions).delete()
    users.delete()
    # The engine's own collector: blobs are shared across missions, so it deletes only those
    # nothing refers to any more, under the lock that keeps writers from reusing them meanwhile.
    blobs_collect_garbage(blobs)


def _blobs_of(mission_ids: list[int]) -> set[str]:
    from django.db import connection

    if not mission_ids:
        return set()
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT refs.value FROM checkpoints_checkpoint c JOIN checkpoints_refmap map ON map.sha256 IN (c.state_map_id, c.agent_map_id),
                   jsonb_each_text(map.refs) refs WHERE c.mission_id = ANY(%s)
            UNION SELECT refs.value FROM checkpoints_checkpoint c, jsonb_each_text(c.agent_delta) refs
                   WHERE c.mission_id = ANY(%s) AND refs.value IS NOT NULL
            UNION SELECT blob_id FROM checkpoints_record WHERE mission_id = ANY(%s) AND blob_id IS NOT NULL
            UNION SELECT refs.value FROM quests_mission m, jsonb_each_text(m.state_refs) refs WHERE m.id = ANY(%s)
            """,
            [mission_ids] * 4,
        )
        return {row[0] for row in cursor.fetchall()}


@contextmanager
def bench_data() -> Iterator[None]:
    """Start from a database without benchmark data and leave it that way, even on failure."""
    with phase("removing earlier benchmark data"):
        remove_bench_data()
    with phase("vacuuming the database"):
        vacuum()
    try:
        yield
    finally:
        with phase("removing benchmark data"):
            remove_bench_data()


def vacuum() -> None:
    """VACUUM (ANALYZE) the benchmark's database, so a run measures the same tables whatever ran
    before it. Every run removes what it wrote; without autovacuum (this machine's PostgreSQL has
    it off: /etc/postgresql/15/main/conf.d/90-ci.conf) the dead rows stay, every index scan steps
    over them, and each run measured slower than the one before (an in-process API checkpoint
    4.4 → 5.4 → 6.3 ms over three runs). A production database vacuums itself."""
    import psycopg
    from django.db import connection

    connection.close()  # VACUUM waits for no transaction of ours
    parts = urlsplit(os.environ["DATABASE_URL"])
    with psycopg.connect(urlunsplit(parts._replace(scheme="postgresql")), autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")


def bench_user(name: str):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_user(USER_PREFIX + name, password=None)


# ---- agent state ---------------------------------------------------------------------------------

WORDS = [
    "venue",
    "budget",
    "client",
    "invoice",
    "draft",
    "calendar",
    "supplier",
    "quote",
    "catering",
    "travel",
    "approval",
    "deadline",
    "contract",
    "deposit",
    "schedule",
    "summary",
    "evidence",
    "risk",
    "follow-up",
    "meeting",
    "agenda",
    "room",
    "capacity",
    "parking",
    "menu",
    "allergy",
    "transfer",
    "hotel",
    "flight",
]


class AgentState:
    """A ~20 KB agent state of `keys` top-level keys of ~1 KB each, shaped like an agent's working
    memory (plans, scratch notes, tool results). `next()` changes exactly one key per call, in turn,
    so consecutive checkpoints differ in one top-level key."""

    def __init__(self, *, keys: int = 20, key_bytes: int = 1000, seed: int = 7) -> None:
        self.rng = random.Random(seed)
        self.key_bytes = key_bytes
        self.tag = "".join(self.rng.choices(string.ascii_lowercase, k=8))
        self.names = [f"part_{i:02d}" for i in range(keys)]
        self.state: dict[str, Any] = {name: self._value(name, 0) for name in self.names}
        self.step = 0

    def _value(self, name: str, version: int) -> dict[str, Any]:
        from checkpoints.services import canonical_json

        value: dict[str, Any] = {"name": name, "version": version, "run": self.tag, "items": []}
        while len(canonical_json(value)) < self.key_bytes:
            value["items"].append(
                {
                    "text": " ".join(self.rng.choices(WORDS, k=6)),
                    "score": round(self.rng.random(), 4),
                    "done": self.rng.random() < 0.5,
                }
            )
        return value

    def next(self) -> tuple[dict[str, Any], str]:
        """The next state (a new dict) and the name of the key that changed."""
        self.step += 1
        name = self.names[self.step % len(self.names)]
        self.state = {**self.state, name: self._value(name, self.step)}
        return self.state, name

    def size(self, name: str | None = None) -> int:
        from checkpoints.services import canonical_json

        if name is not None:
            return len(canonical_json(self.state[name]))
        return len(canonical_json(self.state))


# ---- measuring and printing ----------------------------------------------------------------------


@contextmanager
def phase(name: str) -> Iterator[None]:
    start = time.perf_counter()
    yield
    note(f"{name}: {time.perf_counter() - start:.1f} s")


def load_note() -> None:
    """Figures from a busy machine are not comparable with a quiet one's: say how busy it was."""
    note(f"load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


def timed(fn, *args: Any, **kwargs: Any) -> float:
    start = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - start


def percentile(samples: list[float], p: int) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[p - 1]


def figure(label: str, value: float | str, unit: str = "", fmt: str = ".1f") -> None:
    shown = value if isinstance(value, str) else format(value, fmt)
    print(f"{label}: {shown}{(' ' + unit) if unit else ''}", flush=True)


def note(text: str) -> None:
    print(f"  ({text})", flush=True)


def table(title: str, rows: list[tuple[str, str, str]]) -> None:
    """A compact summary: figure, value, goal (or '')."""
    headers = ("figure", "value", "goal")
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "  ".join("-" * w for w in widths)
    print(f"\n{title}")
    print(line)
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)))
    print(line)
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)))
    print(line, flush=True)
