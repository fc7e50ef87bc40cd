"""The mission page as it opens reads its checkpoint rows the short way (`_head_rows`: the newest
rows and the last verified one) and must draw exactly what the general windowed query draws."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from checkpoints.models import Checkpoint
from quests.models import Mission
from quests.selectors.history import TIMELINE_SIZE, HistoryWindow, PageRows, _head_rows, _windowed_rows, page_rows
from quests.selectors.tree import TREE_REACH
from tests.builders import long_history, running

pytestmark = pytest.mark.django_db


def drawn(rows: PageRows) -> dict:
    def ids(checkpoints):
        return [c.pk for c in checkpoints]

    return {
        "tree": ids(rows.tree),
        "chosen": rows.chosen.pk if rows.chosen else None,
        "last_verified": rows.last_verified.pk if rows.last_verified else None,
        "timeline": ids(rows.timeline),
        "newer": rows.newer,
    }


def head_at(mission: Mission, places_below_newest: int) -> Mission:
    """The mission with its head moved `places_below_newest` checkpoints below the newest."""
    head = Checkpoint.objects.filter(mission=mission).order_by("-seq")[places_below_newest]
    Mission.objects.filter(pk=mission.pk).update(head_checkpoint=head)
    mission.refresh_from_db()
    return mission


@pytest.mark.parametrize(
    ("count", "verified_every", "restore_every"),
    [
        (1, 100, 250),
        (5, 2, 250),
        (TIMELINE_SIZE, 7, 9),
        (TIMELINE_SIZE + 1, 100, 250),
        (TIMELINE_SIZE + 2, 3, 5),
        (60, 25, 250),  # the last verified one far below the newest
        (60, 7, 11),
        (120, 1000, 40),  # nothing verified
    ],
)
def test_the_page_as_it_opens_draws_what_the_windowed_query_draws(alice, count, verified_every, restore_every):
    mission = long_history(alice, count, verified_every=verified_every, restore_every=restore_every, run_length=4)
    quick = _head_rows(mission)
    assert quick is not None
    assert drawn(quick) == drawn(_windowed_rows(mission, HistoryWindow()))


@pytest.mark.parametrize("below", [1, 3, TIMELINE_SIZE - TREE_REACH - 2, TIMELINE_SIZE - TREE_REACH - 1, 10, TIMELINE_SIZE, 40])
def test_a_head_below_the_newest_is_drawn_as_the_windowed_query_draws_it(alice, below):
    mission = head_at(long_history(alice, 60, verified_every=9, restore_every=13, run_length=4), below)
    quick = _head_rows(mission)
    # Too far below the newest, the short way cannot see the tree's older side and steps aside.
    assert (quick is None) == (below + TREE_REACH + 1 >= TIMELINE_SIZE + 1)
    assert drawn(page_rows(mission, HistoryWindow())) == drawn(_windowed_rows(mission, HistoryWindow()))
    if quick is not None:
        assert drawn(quick) == drawn(_windowed_rows(mission, HistoryWindow()))


def test_a_short_history_with_its_head_anywhere_is_read_the_short_way(alice):
    mission = head_at(long_history(alice, TIMELINE_SIZE, verified_every=4, restore_every=250, run_length=4), TIMELINE_SIZE - 1)
    quick = _head_rows(mission)
    assert quick is not None
    assert drawn(quick) == drawn(_windowed_rows(mission, HistoryWindow()))


def test_a_mission_without_checkpoints_is_left_to_the_windowed_query(alice):
    mission, _ = running(alice, "Nothing saved yet")
    if mission.head_checkpoint_id is not None:  # a run's start may save one: then it is a history of one
        assert drawn(page_rows(mission, HistoryWindow())) == drawn(_windowed_rows(mission, HistoryWindow()))
        return
    assert _head_rows(mission) is None
    assert drawn(page_rows(mission, HistoryWindow())) == drawn(_windowed_rows(mission, HistoryWindow()))


def test_the_page_as_it_opens_reads_its_rows_in_one_query(alice):
    mission = long_history(alice, 300, verified_every=100, restore_every=250)
    with CaptureQueriesContext(connection) as captured:
        page_rows(mission, HistoryWindow())
    assert len(captured) == 1
