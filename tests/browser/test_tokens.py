"""The tokens page's mission search in a real browser: live with htmx, and with the Find button
when JavaScript is off; what the person typed survives both."""

import pytest
from django.test import Client
from playwright.sync_api import expect

from quests.models import AgentToken
from tests.builders import new_mission

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_typing_finds_the_mission_and_the_token_is_limited_to_it(page, open_page, login, alice):
    lisbon = new_mission(alice, "Lisbon trip")
    new_mission(alice, "Porto trip")
    login(alice)
    open_page("/tokens/")
    page.evaluate("window.__stayed = true")
    page.get_by_label("Name").first.fill("trip agent")
    expect(page.get_by_role("radio", name="Lisbon trip")).to_have_count(0)
    page.get_by_label("Find an open quest").press_sequentially("lisb")
    expect(page.get_by_role("radio", name="Lisbon trip")).to_be_visible()
    expect(page.get_by_role("radio", name="Porto trip")).to_have_count(0)
    page.get_by_role("radio", name="Lisbon trip").check()
    assert page.evaluate("window.__stayed === true"), "the search reloaded the page"
    expect(page.get_by_label("Name").first).to_have_value("trip agent")
    page.get_by_role("button", name="Create token").click()
    expect(page.get_by_label("Your new token")).to_be_visible()
    assert AgentToken.objects.get(user=alice, name="trip agent").mission_id == lisbon.pk


def test_without_javascript_find_keeps_the_name_and_offers_the_matches(browser, live_server, alice):
    porto = new_mission(alice, "Porto trip")
    client = Client()
    client.force_login(alice)
    context = browser.new_context(java_script_enabled=False)
    context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": live_server.url}])
    page = context.new_page()
    page.goto(live_server.url + "/tokens/")
    page.get_by_label("Name").first.fill("no-js agent")
    page.get_by_label("Find an open quest").fill("porto")
    page.get_by_role("button", name="Find").click()
    expect(page.get_by_label("Name").first).to_have_value("no-js agent")
    page.get_by_role("radio", name="Porto trip").check()
    page.get_by_role("button", name="Create token").click()
    expect(page.get_by_label("Your new token")).to_be_visible()
    assert AgentToken.objects.get(user=alice, name="no-js agent").mission_id == porto.pk
    context.close()
