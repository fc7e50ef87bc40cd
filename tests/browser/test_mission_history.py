"""A long history in a real browser: the tree window moves with its links (the address follows,
the back button comes back), the overview strip centres it, and a checkpoint compares with any
other by number."""

import pytest
from playwright.sync_api import expect

from checkpoints.models import Checkpoint
from quests.selectors.tree import TREE_REACH
from tests.builders import long_history

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_move_the_tree_window_and_come_back(page, open_page, login, alice):
    mission = long_history(alice, 200, restore_every=10, verified_every=7)
    login(alice)
    open_page(f"/missions/{mission.pk}/")
    chosen = page.locator("svg.tree circle.node.chosen")
    expect(chosen).to_have_attribute("data-seq", "200")
    page.get_by_role("link", name="Earlier checkpoints").click()
    expect(chosen).to_have_attribute("data-seq", str(200 - TREE_REACH - 1))
    assert "?at=" in page.url
    page.go_back()
    expect(chosen).to_have_attribute("data-seq", "200")
    page.locator("ol.overview a.bucket").first.click()
    expect(chosen).to_have_attribute("data-seq", "1")
    assert page.locator("svg.tree").get_attribute("data-centre") == chosen.get_attribute("cx")
    page.get_by_role("link", name="Older").click()
    expect(page.locator("ol.timeline")).to_contain_text("#180")
    assert "near=1" in page.url and "before=181" in page.url  # both windows in the address


def test_compare_a_checkpoint_with_any_other_by_number(page, open_page, login, alice):
    mission = long_history(alice, 40)
    seqs = dict(Checkpoint.objects.filter(mission=mission).values_list("seq", "pk"))
    login(alice)
    open_page(f"/checkpoints/{seqs[30]}/")
    page.get_by_label("Compare with #").fill("3")
    page.get_by_role("button", name="Compare").click()
    expect(page.locator("#diff")).to_contain_text("#3 and #30")
    page.get_by_label("Compare with #").fill("99")
    page.get_by_role("button", name="Compare").click()
    expect(page.get_by_role("alert")).to_have_text("This mission has no checkpoint #99.")
    page.get_by_role("link", name="the next one (#31)").click()
    expect(page.locator("#diff")).to_contain_text("#31 and #30")
