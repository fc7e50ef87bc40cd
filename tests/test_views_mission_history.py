"""The mission page and the checkpoint page at any size: the checkpoint tree is a window around a
chosen checkpoint with an overview of the whole history, the timeline comes a page at a time, the
restore picker and the comparison choices stay small, and bad query values give the default."""

import re

import pytest

from checkpoints.models import Checkpoint
from quests.models import Approval
from quests.selectors.history import TIMELINE_SIZE
from quests.selectors.reviews import DECIDED_SHOWN
from quests.selectors.tree import OVERVIEW_BUCKETS, TREE_REACH, branch_runs, off_branch_ranges, on_branch
from quests.services import records
from tests.builders import (  # noqa: F401
    agent_for,
    fast_password_hashing,
    long_history,
    running,
    verified_then_more_work,
    waiting_on_approval,
)

pytestmark = pytest.mark.django_db
HTMX = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "mission-body"}


@pytest.fixture
def history(alice):
    """120 checkpoints, a restore every 10th (each setting the two before it aside)."""
    return long_history(alice, 120, restore_every=10, verified_every=7)


def get(client, url: str, status: int = 200) -> str:
    response = client.get(url)
    assert response.status_code == status, url
    return response.content.decode()


def tree_of(body: str) -> tuple[int, dict[int, tuple[int, int, str]]]:
    """The picture's width and its nodes: seq -> (x, y, classes)."""
    width = int(re.search(r'<svg class="tree" width="(\d+)"', body).group(1))
    nodes = {
        int(seq): (int(x), int(y), classes)
        for x, y, classes, seq in re.findall(r'<circle cx="(\d+)" cy="(\d+)" r="\d+" class="node([^"]*)" data-seq="(\d+)"', body)
    }
    return width, nodes


def compared(body: str) -> tuple[int, int]:
    """The two checkpoint numbers the page compares (the bulk-built ones hold the same state)."""
    found = re.search(r"(?:From #(\d+) to #(\d+))|(?:Nothing changed between #(\d+) and #(\d+))", body)
    return tuple(int(g) for g in found.groups() if g is not None)


def seq_ids(mission) -> dict[int, int]:
    return dict(Checkpoint.objects.filter(mission=mission).values_list("seq", "pk"))


def test_the_tree_shows_a_window_around_the_head_centred(alice_client, history):
    body = get(alice_client, f"/missions/{history.pk}/")
    width, nodes = tree_of(body)
    head = max(nodes)
    assert head == Checkpoint.objects.get(pk=history.head_checkpoint_id).seq
    assert len(nodes) == TREE_REACH + 1  # nothing later than the head: empty space on the right
    x, _, classes = nodes[head]
    assert x == width // 2 and "head" in classes and "chosen" in classes
    assert "Earlier checkpoints" in body and "Later checkpoints" not in body


def test_at_centres_any_checkpoint_and_earlier_and_later_move_the_window(alice_client, history):
    ids = seq_ids(history)
    body = get(alice_client, f"/missions/{history.pk}/?at={ids[60]}")
    width, nodes = tree_of(body)
    assert sorted(nodes) == list(range(60 - TREE_REACH, 60 + TREE_REACH + 1))
    assert nodes[60][0] == width // 2 and "chosen" in nodes[60][2]
    assert f'href="/missions/{history.pk}/?at={ids[60 - TREE_REACH - 1]}"' in body  # earlier
    assert f'href="/missions/{history.pk}/?at={ids[60 + TREE_REACH + 1]}"' in body  # later
    assert "Back to the current one" in body
    first_width, first = tree_of(get(alice_client, f"/missions/{history.pk}/?at={ids[1]}"))
    assert first[1][0] == first_width // 2 and min(first) == 1 and len(first) == TREE_REACH + 1  # empty on the left


def test_branches_set_aside_by_restores_get_lanes_below_and_the_current_branch_stays_on_top(alice_client, history):
    ids = seq_ids(history)
    _, nodes = tree_of(get(alice_client, f"/missions/{history.pk}/?at={ids[60]}"))
    top = min(y for _, y, _ in nodes.values())
    for seq in (58, 59):  # restore #60 went back to #57
        assert "abandoned" in nodes[seq][2] and nodes[seq][1] > top
    for seq in (56, 57, 60, 61):
        assert "abandoned" not in nodes[seq][2] and nodes[seq][1] == top


def test_an_edge_whose_parent_is_outside_the_window_comes_in_as_a_stub(alice_client, history):
    ids = seq_ids(history)
    body = get(alice_client, f"/missions/{history.pk}/?at={ids[60]}")
    _, nodes = tree_of(body)
    y = nodes[60 - TREE_REACH][1]
    assert f'd="M0 {y} L{nodes[60 - TREE_REACH][0]} {y}" class="edge stub"' in body
    assert 'class="edge stub"' not in get(alice_client, f"/missions/{history.pk}/?at={ids[1]}")  # #1 has no parent


def test_the_current_branch_is_found_from_the_restores_alone():
    """`branch_runs` must agree with walking every parent link from the head, on any history
    written as the services write it (each checkpoint's parent is the one before it, a restore's
    the one it restored, a copy's none)."""
    import random

    for trial in range(200):
        rng = random.Random(trial)
        parent: dict[int, int | None] = {1: None}
        for seq in range(2, rng.randint(2, 60)):
            kind = rng.random()
            parent[seq] = rng.randint(1, seq - 1) if kind < 0.15 else None if kind < 0.18 else seq - 1
        head = max(parent)
        walked, cursor = set(), head
        while cursor is not None:
            walked.add(cursor)
            cursor = parent[cursor]
        jumps = {seq: p for seq, p in parent.items() if p is None or p != seq - 1}
        runs = branch_runs(head, jumps)
        assert {seq for seq in parent if on_branch(seq, runs)} == walked
        assert len(runs) <= len(jumps) + 1
        gaps = off_branch_ranges(1, head, runs)
        assert {seq for seq in parent if any(lo <= seq <= hi for lo, hi in gaps)} == set(parent) - walked


def test_the_overview_covers_the_whole_history_in_a_fixed_number_of_buckets(alice_client, alice):
    mission = long_history(alice, 350, restore_every=10, verified_every=7)
    body = get(alice_client, f"/missions/{mission.pk}/")
    buckets = re.findall(r'<a class="bucket([^"]*)" href="\?near=(\d+)"[^>]*><span class="visually-hidden">#(\d+)(?: to #(\d+))?', body)
    assert 1 < len(buckets) <= OVERVIEW_BUCKETS
    assert int(buckets[0][2]) == 1 and int(buckets[-1][3]) == 350
    assert all(int(b[2]) == int(a[3]) + 1 for a, b in zip(buckets, buckets[1:]))  # no stretch left out
    assert any("abandoned" in b[0] for b in buckets) and any("verified" in b[0] for b in buckets)
    assert "chosen" in buckets[-1][0] and "chosen" not in buckets[0][0]
    for classes, _, first, last in buckets:  # every 7th verified; #8 and #9 set aside by the restore #10, and so on
        stretch = range(int(first), int(last or first) + 1)
        assert ("verified" in classes) == any(seq % 7 == 0 for seq in stretch)
        assert ("abandoned" in classes) == any(seq % 10 in (8, 9) for seq in stretch)
    width, nodes = tree_of(get(alice_client, f"/missions/{mission.pk}/?near={buckets[1][2]}"))
    assert nodes[int(buckets[1][2])][0] == width // 2 and "chosen" in nodes[int(buckets[1][2])][2]


def test_near_centres_the_first_checkpoint_numbered_from_there(alice_client, alice):
    mission = long_history(alice, 30)
    ids = seq_ids(mission)
    Checkpoint.objects.filter(pk__in=[ids[12], ids[13]]).update(parent=None)
    Checkpoint.objects.filter(pk=ids[14]).update(parent_id=ids[11])
    Checkpoint.objects.filter(pk__in=[ids[12], ids[13]]).delete()  # as pruning would
    width, nodes = tree_of(get(alice_client, f"/missions/{mission.pk}/?near=12"))
    assert nodes[14][0] == width // 2 and 12 not in nodes
    assert "chosen" in tree_of(get(alice_client, f"/missions/{mission.pk}/?near=999"))[1][30][2]  # beyond: the head


def test_the_timeline_comes_a_page_at_a_time_and_the_url_keeps_the_window(alice_client, history):
    ids = seq_ids(history)
    url = f"/missions/{history.pk}/"
    body = get(alice_client, url)
    chips = [int(s) for s in re.findall(r'class="chip[^"]*" href="/checkpoints/\d+/">#(\d+)', body)]
    assert sorted(chips) == list(range(101, 121)) and len(chips) == TIMELINE_SIZE
    assert f'href="{url}?before=101"' in body and "Latest" not in body
    older = get(alice_client, f"{url}?before=101")
    assert sorted(int(s) for s in re.findall(r'class="chip[^"]*" href="/checkpoints/\d+/">#(\d+)', older)) == list(range(81, 101))
    assert f'href="{url}?before=81"' in older and f'href="{url}"' in older  # older, and back to the latest
    both = get(alice_client, f"{url}?at={ids[30]}&before=41")
    assert f'href="{url}?at={ids[30]}&amp;before=21"' in both  # older keeps the tree's window
    assert f'href="{url}?at={ids[30 - TREE_REACH - 1]}&amp;before=41"' in both  # earlier keeps the timeline's
    assert f'name="next" value="{url}?at={ids[30]}&amp;before=41"' in both  # actions come back here
    oldest = get(alice_client, f"{url}?before=3")
    assert "#1 " in oldest and "Older" not in oldest.split('id="timeline-h"')[1]


def test_the_poll_keeps_the_window(alice_client, alice):
    agent = agent_for(alice)
    mission, run = running(alice, agent=agent)
    made = [records.checkpoint_create(actor=agent, run_id=run.pk, agent_state={"i": i})[0] for i in range(3)]
    body = get(alice_client, f"/missions/{mission.pk}/?at={made[0].pk}&before=3")
    assert f'hx-get="/missions/{mission.pk}/?at={made[0].pk}&amp;before=3&amp;since=' in body
    assert 'hx-trigger="every 3s"' in body
    poll = alice_client.get(f"/missions/{mission.pk}/?at={made[0].pk}&before=3&since=old", **HTMX)
    assert poll.status_code == 200 and f"?at={made[0].pk}&amp;before=3&amp;since=" in poll.content.decode()
    assert tree_of(poll.content.decode())[1][made[0].seq][2].count("chosen") == 1


@pytest.mark.parametrize(
    "query",
    [
        "at=abc",
        "at=-3",
        "at=0",
        "at=99999999",
        "at=99999999999999999999999",
        "at=1e5",
        "before=xyz",
        "before=-1",
        "before=0",
        "before=99999999999999999999999",
        "at=&before=",
        "at=%00",
        "near=abc",
        "near=99999999999999999999",
        "near=-2",
    ],
)
def test_bad_window_values_give_the_default_window_never_a_500(alice_client, history, query):
    body = get(alice_client, f"/missions/{history.pk}/?{query}")
    assert "<svg" in body


def test_another_missions_checkpoint_is_not_centred(alice_client, alice, history):
    other = verified_then_more_work(alice, "Other")
    body = get(alice_client, f"/missions/{history.pk}/?at={other.verified_checkpoint_id}")
    width, nodes = tree_of(body)
    assert nodes[max(nodes)][0] == width // 2  # the head, as by default
    assert f"/checkpoints/{other.verified_checkpoint_id}/" not in body


def test_the_restore_picker_lists_the_window_and_the_last_verified_one(alice_client, history):
    ids = seq_ids(history)
    body = get(alice_client, f"/missions/{history.pk}/?at={ids[110]}")
    options = re.findall(r'<option value="(\d+)"( selected)?>#(\d+)[^<]*</option>', body)
    assert len(options) <= 2 * TREE_REACH + 2
    last_verified = Checkpoint.objects.get(pk=history.last_verified_checkpoint_id)
    assert any(int(o[0]) == last_verified.pk for o in options)
    assert f">#{last_verified.seq} · saved by the agent · last verified" in body
    assert [o[0] for o in options if o[1]] == [str(ids[110])]  # the centred one, chosen explicitly
    assert "Any checkpoint can be restored from its own page." in body
    far = get(alice_client, f"/missions/{history.pk}/?at={ids[5]}")
    assert f">#{last_verified.seq} · saved by the agent · last verified" in far  # offered although far from the window
    assert len(re.findall(r"<option ", far)) == 4 + 1 + TREE_REACH + 1  # #1 to #4, #5, those after it, the last verified


def test_decided_approvals_show_the_newest_with_a_count_of_the_rest(alice_client, alice):
    mission, pending = waiting_on_approval(alice)
    Approval.objects.bulk_create(Approval(mission=mission, action=f"send email {i}", status="approved", reason="r") for i in range(DECIDED_SHOWN + 5))
    body = get(alice_client, f"/missions/{mission.pk}/")
    assert "Waiting for your approval to deploy to production" in body and ">Approve<" in body  # pending: all of them
    assert f"Decided approvals ({DECIDED_SHOWN + 5})" in body
    shown = re.findall(r"</span> (send email \d+)\s", body)
    assert shown == [f"send email {i}" for i in range(DECIDED_SHOWN + 4, 4, -1)]  # the newest, newest first
    assert f"The newest {DECIDED_SHOWN} are shown, not 5 older ones" in body


def test_the_checkpoint_page_compares_with_any_checkpoint_by_number(alice_client, history):
    ids = seq_ids(history)
    url = f"/checkpoints/{ids[60]}/"
    body = get(alice_client, url)
    assert compared(body) == (57, 60)  # a restore: compared with the checkpoint it restored
    for label, seq in (("the parent", 57), ("the previous one", 59), ("the next one", 61), ("the current one", 120)):
        assert f'<a href="?against={ids[seq]}"' in body and f"{label} (#{seq})" in body
    assert "the last verified (#119)" in body
    assert "<option" not in body  # no list of every checkpoint
    assert compared(get(alice_client, f"{url}?compare=3")) == (3, 60)
    assert compared(get(alice_client, f"{url}?compare=%23110")) == (110, 60)
    assert compared(get(alice_client, f"{url}?against={ids[61]}")) == (61, 60)


@pytest.mark.parametrize(
    "value, message",
    [
        ("abc", "Write the number of a checkpoint"),
        ("", "Write the number of a checkpoint"),
        ("-4", "Write the number"),
        ("99999999999999999999", "Write the number"),
        ("500", "This mission has no checkpoint #500."),
        ("60", "#60 is this checkpoint"),
    ],
)
def test_a_bad_number_to_compare_with_is_a_form_error(alice_client, history, value, message):
    ids = seq_ids(history)
    body = get(alice_client, f"/checkpoints/{ids[60]}/?compare={value}", status=422)
    assert message in body and 'role="alert"' in body and 'aria-invalid="true"' in body
    assert compared(body) == (57, 60)  # the parent's diff still shows


def test_a_number_of_another_mission_compares_within_this_one(alice_client, alice, history):
    other = long_history(alice, 3, title="Short")
    ids = seq_ids(other)
    assert "This mission has no checkpoint #50." in get(alice_client, f"/checkpoints/{ids[3]}/?compare=50", status=422)
    assert f"/checkpoints/{seq_ids(history)[50]}/" not in get(alice_client, f"/checkpoints/{ids[3]}/?compare=1")
