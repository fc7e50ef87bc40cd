"""The pages at real scale (issue 13): `/`, `/approvals/`, the mission page and the checkpoint page
of a person with 10 missions (one of them with a history of 10 checkpoints) against a person with
10,000 missions (one of them with 10,000 checkpoints), through Django's test client on PostgreSQL.

    .venv/bin/python bench/bench_pages.py     (or `make bench`; BENCH_QUICK=1 for a smoke run)

For each page: the median server time over alternating rounds (each round starts with the next
path, so machine noise falls on the small and the large world alike), the HTML size and the number
of queries (CaptureQueriesContext), small and large side by side with the ratio. Goals: the large
world's time at most 1.5× the small world's, its HTML at most 100 KB, the same number of queries.
A MISSED goal is a figure, not a failure: the script fails only on errors.

Both worlds are built by one function, the large one in bulk (bulk_create; the checkpoint ids are
drawn from the table's sequence first so that parents can be set in the same insert):
- missions in every status, one to three planned milestones each; about 30 items waiting for the
  person in the small world (more than an inbox page; the count is printed), 1,500 in the large
  one (an approval and two milestones to review on each mission that waits);
- the history mission: a skeleton written through the services (mission, run, two checkpoints with
  real agent states whose blobs the others share), then runs of the history's hundredth part (three
  checkpoints at least), three restores that start new branches, a verified checkpoint every tenth
  part of the history with its approved milestone, a pending approval at the head, and a ledger
  (3 completed operations in the small world; 1,000 completed and 2 to reconcile in the large one,
  an agent that sent 1,000 emails: the page shows those 2 and the newest 10).

Environment: BENCH_DATABASE_URL (default: database questlog_bench_pages on 127.0.0.1), BENCH_QUICK=1
(the large world is then 200 missions, a history of 300 checkpoints and 150 items waiting).
"""

import logging
import os
import statistics
import sys
from dataclasses import dataclass
from datetime import timedelta

QUICK = os.environ.get("BENCH_QUICK") == "1" or "--quick" in sys.argv
os.environ["DATABASE_URL"] = os.environ.get("BENCH_DATABASE_URL", "postgres://questlog:questlog@127.0.0.1:5432/questlog_bench_pages")

import common  # noqa: E402

common.setup()

from django.db import connection, transaction  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.utils import timezone  # noqa: E402
from rounds import rounds, timed  # noqa: E402

from checkpoints.models import Checkpoint, Operation, OperationStatus  # noqa: E402
from quests.models import Approval, Milestone, Mission, MissionStatus, ReviewStatus, Run  # noqa: E402
from quests.selectors.people import inbox_count  # noqa: E402
from quests.services import missions, records, runs  # noqa: E402
from quests.services.audit import Actor  # noqa: E402
from quests.services.tokens import token_create  # noqa: E402

# Signing the two people in is not news.
logging.getLogger("axes").setLevel(logging.WARNING)

# missions, checkpoints of the history mission, items waiting for the person, and the history
# mission's ledger: operations completed and attempted (to reconcile)
SMALL = (10, 10, 30, (3, 0))
LARGE = (200, 300, 150, (1_000, 2)) if QUICK else (10_000, 10_000, 1_500, (1_000, 2))
ROUNDS = 2 if QUICK else 6
SAMPLES = 3 if QUICK else 8  # per path per round
WARM_UP = 2
TIME_RATIO_GOAL = 1.5
HTML_GOAL_BYTES = 100 * 1024
BATCH = 2_000
STATUSES = [s for s in MissionStatus.values if s != MissionStatus.WAITING_FOR_APPROVAL]


@dataclass
class World:
    name: str
    client: Client
    urls: dict[str, str]


# ---- building a world ----------------------------------------------------------------------------


def _reserve_checkpoint_ids(count: int) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT nextval(pg_get_serial_sequence('checkpoints_checkpoint', 'id')) FROM generate_series(1, %s)", [count])
        return [row[0] for row in cursor.fetchall()]


def _missions(user, count: int, waiting: int) -> None:
    """`count` missions in every status, each with three planned milestones. The first `waiting`
    / 3 of them wait for the person: an approval and two milestones to review each; the others'
    milestones are approved or not claimed yet."""
    now = timezone.now()
    planned = [{"kind": "research_complete", "title": "Research"}, {"kind": "plan_approved", "title": "Plan"}, {"kind": "custom", "title": "Done"}]
    asking = -(-waiting // 3)
    made: list[Mission] = []
    for start in range(0, count, BATCH):
        made += Mission.objects.bulk_create(
            Mission(
                owner=user,
                title=f"Quest {i}: book the venue for team {i % 97}",
                objective=f"Find and book a venue for {12 + i % 30} people in May.",
                status=MissionStatus.WAITING_FOR_APPROVAL if i < asking else STATUSES[i % len(STATUSES)],
                planned_milestones=planned,
            )
            for i in range(start, min(start + BATCH, count))
        )
    # Activity spread over the past weeks, as a real board's is; the ones waiting among the others.
    with connection.cursor() as cursor:
        cursor.execute("UPDATE quests_mission SET updated_at = %s - ((id * 7919) %% 10007) * interval '3 minutes' WHERE owner_id = %s", [now, user.pk])
    Milestone.objects.bulk_create(
        (
            Milestone(
                mission=m,
                kind=kind["kind"],
                title=kind["title"],
                summary="What was done and why it is enough.",
                review_status=ReviewStatus.PENDING_REVIEW if i < asking and k > 0 else ReviewStatus.APPROVED,
            )
            for i, m in enumerate(made)
            for k, kind in enumerate(planned)
            if i < asking or k < 1 + i % 3
        ),
        batch_size=BATCH,
    )
    Approval.objects.bulk_create(
        (
            Approval(mission=m, action=f"send the booking request for quest {m.pk}", payload={"venue": "Hall A", "people": 12}, reason="It commits the budget.")
            for m in made[:asking]
        ),
        batch_size=BATCH,
    )


def _history(user, agent: Actor, size: int) -> tuple[Mission, Checkpoint]:
    """The history mission: a skeleton through the services, then `size` checkpoints in all."""
    mission, _ = missions.mission_create(
        actor=agent,
        title="The long trip: every booking of the season",
        objective="Book the season's trips within budget.",
        constraints=["Never pay more than 4,000 EUR without asking."],
    )
    first_run, _ = runs.run_start(actor=agent, mission_id=mission.pk, agent="bench")
    state = common.AgentState(keys=20, key_bytes=300, seed=3)
    templates = [records.checkpoint_create(actor=agent, run_id=first_run.pk, agent_state=state.next()[0])[0] for _ in range(2)]
    runs.run_stop(actor=agent, run_id=first_run.pk, reason="blocked_external", detail="Booking site down")
    mission.refresh_from_db()
    by_seq = dict(Checkpoint.objects.filter(mission=mission).values_list("seq", "id"))  # the stop wrote one too
    done, parent_id = len(by_seq), mission.head_checkpoint_id
    run_length = max(3, size // 100)
    verified_every = max(3, size // 10)
    restores = {size * k // 4 for k in (1, 2, 3)}
    ids = _reserve_checkpoint_ids(size - done)
    new_runs = Run.objects.bulk_create(
        Run(mission=mission, number=first_run.number + 1 + r, agent="bench", ended_at=timezone.now(), stop_reason="blocked_external")
        for r in range((size - done) // run_length + 1)
    )
    start = timezone.now() - timedelta(days=30)
    rows: list[Checkpoint] = []
    for n, pk in enumerate(ids):
        seq = done + n + 1
        template = templates[seq % 2]
        restore = seq in restores
        if restore:
            # Back to a checkpoint a sixth of the history earlier: what came after it becomes a branch.
            parent_id = by_seq[max(1, seq - max(2, size // 6))]
        rows.append(
            Checkpoint(
                id=pk,
                mission=mission,
                run=None if restore else new_runs[n // run_length],
                parent_id=parent_id,
                seq=seq,
                trigger="restore" if restore else "agent",
                hash=template.hash,
                # The history shares its templates' reference maps.
                state_map_id=template.state_map_id,
                agent_map_id=template.agent_map_id,
                agent_delta=template.agent_delta,
                size_bytes=template.size_bytes,
                agent_state_bytes=template.agent_state_bytes,
                verified=seq % verified_every == 0,
                verified_at=timezone.now() if seq % verified_every == 0 else None,
                note="Restored by you" if restore else "",
            )
        )
        by_seq[seq], parent_id = pk, pk
    Checkpoint.objects.bulk_create(rows, batch_size=BATCH)
    # created_at is set on insert (auto_now_add): the history's times, a minute apart, are written afterwards.
    with connection.cursor() as cursor:
        cursor.execute("UPDATE checkpoints_checkpoint SET created_at = %s + seq * interval '1 minute' WHERE mission_id = %s", [start, mission.pk])
    verified = [c for c in rows if c.verified]
    Milestone.objects.bulk_create(
        Milestone(
            mission=mission,
            run=c.run,
            kind="custom",
            title=f"Trip {c.seq} booked",
            checkpoint=c,
            gate=True,
            review_status=ReviewStatus.APPROVED,
            reviewed_at=timezone.now(),
            reviewed_by=user,
        )
        for c in verified
    )
    head, last_run = rows[-1], new_runs[-1]
    Run.objects.filter(pk=last_run.pk).update(ended_at=None, stop_reason=None)
    Approval.objects.create(mission=mission, run=last_run, action="pay the deposit", payload={"amount": "900 EUR"}, reason="It spends money.")
    Mission.objects.filter(pk=mission.pk).update(
        head_checkpoint_id=head.pk,
        last_verified_checkpoint_id=verified[-1].pk if verified else None,
        next_checkpoint_seq=size + 1,
        run_count=last_run.number,
        active_run=last_run,
        status=MissionStatus.WAITING_FOR_APPROVAL,
        updated_at=timezone.now(),
    )
    return mission, Checkpoint.objects.get(pk=head.pk)


def _ledger(mission: Mission, completed: int, attempted: int) -> None:
    """The history mission's operation ledger: `completed` emails sent, then `attempted` ones whose
    outcome is unknown (to reconcile), each with its receipt as an email provider returns it."""
    run = Run.objects.filter(mission=mission).order_by("-number").first()
    Operation.objects.bulk_create(
        (
            Operation(
                mission=mission,
                run=run,
                key=f"email-{n}",
                request_hash=f"{n:064x}",
                kind="email.send",
                target=f"guest{n}@example.com",
                request={"to": f"guest{n}@example.com", "template": "itinerary"},
                status=OperationStatus.COMPLETED if n < completed else OperationStatus.ATTEMPTED,
                attempts=1,
                external_id=f"msg-{n:06d}" if n < completed else "",
                external_status="delivered" if n < completed else "",
                receipt={"message_id": f"msg-{n:06d}", "accepted": True} if n < completed else None,
            )
            for n in range(completed + attempted)
        ),
        batch_size=BATCH,
    )


def build(name: str, mission_count: int, history_size: int, waiting: int, ledger: tuple[int, int]) -> World:
    with common.phase(
        f"building the {name} world: {mission_count:,} missions, a history of {history_size:,} checkpoints, {waiting:,} items waiting, "
        f"{ledger[0]:,} completed operations"
    ):
        user = common.bench_user(name)
        token, _ = token_create(user=user, name="bench")
        with transaction.atomic():
            _missions(user, mission_count - 1, waiting - 1)  # the history mission waits on an approval too
            mission, head = _history(user, Actor(user=user, token=token), history_size)
            _ledger(mission, *ledger)
        # As autovacuum leaves a live database: statistics current, dead rows of the bulk updates gone.
        # The bulk update of every mission's activity time above also left each index that carries
        # it with a second, dead entry per mission; vacuum empties those but leaves their pages half
        # full, twice to four times the size a live database's indexes have (its missions change one
        # at a time, and b-tree bottom-up deletion removes such old versions as they appear). At
        # that size the planner reads the person's 10,000 missions from the table instead of from
        # the index that answers the board's counts: rebuilt, they are as a live database has them.
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")
            cursor.execute("REINDEX TABLE quests_mission")
    common.note(f"{name} world: {inbox_count(user):,} items waiting for the person")
    client = Client(SERVER_NAME="localhost")
    client.force_login(user)
    return World(
        name,
        client,
        {
            "/": "/",
            "/approvals/": "/approvals/",
            "mission page": f"/missions/{mission.pk}/",
            "checkpoint page": f"/checkpoints/{head.pk}/",
        },
    )


# ---- measuring -----------------------------------------------------------------------------------


def fetch(world: World, url: str) -> bytes:
    response = world.client.get(url)
    assert response.status_code == 200, f"{world.name} {url}: {response.status_code}"
    return response.content


def shape(world: World, url: str) -> tuple[int, int]:
    """HTML bytes and queries of one request."""
    with CaptureQueriesContext(connection) as captured:
        body = fetch(world, url)
    return len(body), len(captured)


def measure(small: World, large: World) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    verdicts: list[tuple[str, bool]] = []
    for page in small.urls:
        for world in (small, large):
            for _ in range(WARM_UP):
                fetch(world, world.urls[page])
        took = rounds(
            {world.name: (lambda w=world: timed(lambda: fetch(w, w.urls[page]))) for world in (small, large)},
            count=ROUNDS,
            samples=SAMPLES,
        )
        ms = {name: statistics.median(samples) * 1000 for name, samples in took.items()}
        (small_bytes, small_queries), (large_bytes, large_queries) = shape(small, small.urls[page]), shape(large, large.urls[page])
        ratio = ms["large"] / ms["small"]
        checks = [
            (f"{page} time", ratio <= TIME_RATIO_GOAL, f"{ms['small']:.1f} → {ms['large']:.1f} ms ({ratio:.2f}×)", f"≤ {TIME_RATIO_GOAL}×"),
            (
                f"{page} HTML",
                large_bytes <= HTML_GOAL_BYTES,
                f"{small_bytes / 1024:.1f} → {large_bytes / 1024:.1f} KB ({large_bytes / small_bytes:.2f}×)",
                f"≤ {HTML_GOAL_BYTES // 1024} KB",
            ),
            (f"{page} queries", large_queries == small_queries, f"{small_queries} → {large_queries}", "equal"),
        ]
        for label, met, value, goal in checks:
            rows.append((label, value, f"{goal} {'MET' if met else 'MISSED'}"))
            verdicts.append((label, met))
        urls = small.urls[page] if small.urls[page] == large.urls[page] else f"{small.urls[page]} / {large.urls[page]}"
        common.figure(
            f"{page} ({urls})", f"{ms['small']:.1f} ms / {ms['large']:.1f} ms, {small_bytes:,} B / {large_bytes:,} B, {small_queries} / {large_queries} queries"
        )
    met = sum(1 for _, ok in verdicts if ok)
    rows.append(("goals met", f"{met} of {len(verdicts)}", ""))
    return rows


def main() -> None:
    print(f"Pages at real scale{' (quick mode)' if QUICK else ''}, database {connection.settings_dict['NAME']}")
    with common.bench_data():
        small = build("small", *SMALL)
        large = build("large", *LARGE)
        print(f"\n== server time (median of {ROUNDS} alternating rounds of {SAMPLES} requests per world), HTML size, queries: small / large")
        common.load_note()
        rows = measure(small, large)
    common.table(
        f"Pages: {SMALL[0]:,} missions and {SMALL[1]:,} checkpoints → {LARGE[0]:,} missions and {LARGE[1]:,} checkpoints (small → large)",
        rows,
    )
    common.note("the board shows a page of 25 quests when there are 25 or more: the small world fills only 10 of them")


if __name__ == "__main__":
    main()
