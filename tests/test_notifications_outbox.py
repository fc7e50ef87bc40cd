"""The outbox on PostgreSQL: an event's notification and its deliveries in one statement
(quests.engine.outbox), with the rules of `notifications.events.emit_many`: which events are new,
the mode (the caller's, the person's preference, the kind's default) and who is delivered to."""

import threading

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from notifications.events import emit, emit_many
from notifications.models import Delivery, Notification, NotificationPreference, WebhookEndpoint
from tests.test_engine import counted_on_postgresql
from tests.threads import reporting

pytestmark = pytest.mark.django_db(transaction=True)

TRANSACTION_STATEMENTS = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE SAVEPOINT")


def hook(owner, events=("approval.requested",), *, disabled=False) -> WebhookEndpoint:
    from django.utils import timezone

    return WebhookEndpoint.objects.create(
        owner=owner, url="https://hooks.example.com/q", events=list(events), secret="whsec_x", disabled_at=timezone.now() if disabled else None
    )


def deliveries_of(notification: Notification) -> list[tuple[str, int | None, str, str]]:
    return [(d.channel, d.endpoint_id, d.message_id, d.status) for d in Delivery.objects.filter(notification=notification).order_by("pk")]


@counted_on_postgresql
def test_an_event_and_its_deliveries_are_one_statement(alice):
    wanted, other_kind, disabled = hook(alice), hook(alice, ("mission.failed",)), hook(alice, disabled=True)
    with CaptureQueriesContext(connection) as captured, transaction.atomic():
        made = emit(kind="approval.requested", owner_id=alice.pk, dedupe_key="approval.requested:1", data={"needed": "a decision"})
    assert [q["sql"] for q in captured.captured_queries if not q["sql"].startswith(TRANSACTION_STATEMENTS)][1:] == []
    assert made is not None and Notification.objects.get() == made
    stored = Notification.objects.get()
    assert (stored.event_id, stored.data, stored.in_digest, stored.kind) == (made.event_id, {"needed": "a decision"}, False, "approval.requested")
    hexed = made.event_id.hex
    # Approvals are told at once (the kind's default): an email, and the one endpoint that wants it.
    assert deliveries_of(made) == [("email", None, f"{hexed}.email", "pending"), ("webhook", wanted.pk, f"msg_{hexed}_{wanted.pk}", "pending")]
    assert all(d.next_attempt_at == stored.created_at for d in Delivery.objects.all())
    assert other_kind.pk and disabled.pk  # made, and delivered nothing


def test_the_persons_preference_chooses_the_mode(alice):
    NotificationPreference.objects.create(owner=alice, kind="approval.requested", mode="digest")
    endpoint = hook(alice)
    with transaction.atomic():
        made = emit(kind="approval.requested", owner_id=alice.pk, dedupe_key="approval.requested:2", data={})
    assert made is not None and Notification.objects.get().in_digest
    assert deliveries_of(made) == [("webhook", endpoint.pk, f"msg_{made.event_id.hex}_{endpoint.pk}", "pending")]
    NotificationPreference.objects.filter(owner=alice).update(mode="off")
    with transaction.atomic():
        quiet = emit(kind="approval.requested", owner_id=alice.pk, dedupe_key="approval.requested:3", data={})
    assert quiet is not None and not Notification.objects.get(pk=quiet.pk).in_digest
    assert [channel for channel, *_ in deliveries_of(quiet)] == ["webhook"]


def test_the_callers_endpoints_and_mode_override_the_persons(alice):
    hook(alice)
    with transaction.atomic():
        made = emit(kind="webhook.disabled", owner_id=alice.pk, dedupe_key="webhook.disabled:1", data={}, endpoints=[], email=True)
    assert made is not None and [channel for channel, *_ in deliveries_of(made)] == ["email"]
    only = hook(alice, ("mission.failed",))
    with transaction.atomic():
        tested = emit(kind="webhook.test", owner_id=alice.pk, dedupe_key="webhook.test:1", data={}, endpoints=[only], email=False)
    assert tested is not None and deliveries_of(tested) == [("webhook", only.pk, f"msg_{tested.event_id.hex}_{only.pk}", "pending")]


def test_an_event_emitted_before_is_left_out_and_the_rest_are_made_in_order(alice):
    with transaction.atomic():
        emit(kind="mission.failed", owner_id=alice.pk, dedupe_key="mission.failed:1:1", data={})
        made = emit_many(
            kind="mission.failed", owner_id=alice.pk, events=[("mission.failed:1:1", {}), ("mission.failed:2:1", {"n": 2}), ("mission.failed:3:1", {"n": 3})]
        )
    assert [(n.dedupe_key, n.data) for n in made] == [("mission.failed:2:1", {"n": 2}), ("mission.failed:3:1", {"n": 3})]
    assert list(Notification.objects.order_by("pk").values_list("dedupe_key", flat=True)) == ["mission.failed:1:1", "mission.failed:2:1", "mission.failed:3:1"]


@pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="a row lock held by another transaction is PostgreSQL's: SQLite locks the whole database (never skipped by make test)",
)
def test_two_emissions_of_one_event_at_once_make_one_and_neither_fails(alice):
    """The twin that waits on the first's unique dedupe key makes nothing, and its own transaction
    goes on (no savepoint needed): real threads, real PostgreSQL."""
    first_inserted, first_may_commit = threading.Event(), threading.Event()
    answers: dict[str, object] = {}
    errors: list[BaseException] = []

    def first() -> None:
        with transaction.atomic():
            answers["first"] = emit(kind="mission.failed", owner_id=alice.pk, dedupe_key="mission.failed:9:1", data={"who": "first"})
            first_inserted.set()
            first_may_commit.wait(timeout=30)

    def second() -> None:
        first_inserted.wait(timeout=30)
        with transaction.atomic():
            answers["second"] = emit(kind="mission.failed", owner_id=alice.pk, dedupe_key="mission.failed:9:1", data={"who": "second"})
            answers["after"] = emit(kind="mission.failed", owner_id=alice.pk, dedupe_key="mission.failed:10:1", data={})

    threads = [threading.Thread(target=reporting(errors, first)), threading.Thread(target=reporting(errors, second))]
    for t in threads:
        t.start()
    first_inserted.wait(timeout=30)
    threading.Timer(0.5, first_may_commit.set).start()  # the second is blocked on the key by then
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    assert answers["first"] is not None and answers["second"] is None and answers["after"] is not None
    assert list(Notification.objects.filter(dedupe_key="mission.failed:9:1").values_list("data", flat=True)) == [{"who": "first"}]
