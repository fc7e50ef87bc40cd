"""checkpoints.roundtrip: several statements, compiled by Django, sent in one round trip, with
the results each would have given alone."""

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext

from checkpoints import roundtrip
from checkpoints.models import Blob, Record
from checkpoints.roundtrip import RoundTrip, one_round_trip
from quests.models import Mission

pytestmark = pytest.mark.django_db


@pytest.fixture(params=["one execute", "one by one"])
def trip_mode(request, monkeypatch):
    if request.param == "one by one":
        monkeypatch.setattr(roundtrip, "_takes_several_statements", lambda connection: False)
    return request.param


def test_inserts_updates_and_selects_run_in_order_and_give_their_results(alice, trip_mode):
    mission = Mission.objects.create(owner=alice, title="T", objective="O")
    trip = RoundTrip()
    first = Record(mission=mission, kind="note", text="one")
    inserted = trip.insert([first, Record(mission=mission, kind="decision", text="two")])
    changed = trip.update(Mission.objects.filter(pk=mission.pk), title="Renamed")
    seen = trip.select(Record.objects.filter(mission=mission).select_related("mission").order_by("id"))
    values = trip.select(Mission.objects.filter(pk=mission.pk).values("title"))
    with CaptureQueriesContext(connection) as captured:
        trip.run()
    assert len(captured) == (1 if trip_mode == "one execute" else 4)
    assert first.pk is not None and not first._state.adding
    assert [r.pk for r in seen.rows] == [o.pk for o in inserted.objs]
    assert [r.text for r in seen.rows] == ["one", "two"]
    assert seen.rows[0].mission.title == "Renamed"  # the later select sees the earlier update
    assert changed.count == 1
    assert values.rows == [{"title": "Renamed"}]


def test_ignored_conflicts_report_which_rows_were_new(trip_mode):
    Blob.objects.create(sha256="a" * 64, data=b"old", size_bytes=3)
    trip = RoundTrip()
    step = trip.insert(
        [Blob(sha256="a" * 64, data=b"old", size_bytes=3), Blob(sha256="b" * 64, data=b"new", size_bytes=3)],
        ignore_conflicts=True,
    )
    trip.run()
    assert step.inserted == ["b" * 64]
    assert Blob.objects.count() == 2


def test_an_error_fails_the_whole_round_trip(alice, trip_mode):
    mission = Mission.objects.create(owner=alice, title="T", objective="O")
    with pytest.raises(IntegrityError), transaction.atomic():
        trip = RoundTrip()
        trip.insert(Record(mission=mission, kind="note", text="kept only if all succeed"))
        trip.insert(Mission(owner_id=alice.pk, title="T", objective="O", pk=mission.pk))
        trip.run()
    assert not Record.objects.filter(mission=mission).exists()


def test_one_round_trip_reads_several_querysets(alice):
    Mission.objects.create(owner=alice, title="A", objective="O")
    with CaptureQueriesContext(connection) as captured:
        missions, titles, empty = one_round_trip(Mission.objects.all(), Mission.objects.values_list("title", flat=True), Record.objects.none())
    assert [m.title for m in missions] == ["A"] and list(titles) == ["A"] and empty == []
    assert len(captured) == 1
