"""Logging in and out in a real browser, and the 404 for another user's mission."""

import pytest
from playwright.sync_api import expect

from tests.builders import new_mission

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_person_logs_in_and_out(page, open_page, live_server, alice):
    open_page("/")
    expect(page).to_have_url(f"{live_server.url}/accounts/login/?next=/")
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill("alice-password")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Your quests")).to_be_visible()
    expect(page.get_by_role("heading", name="No quests yet")).to_be_visible()
    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(f"{live_server.url}/accounts/login/")
    expect(page.get_by_role("heading", name="Log in")).to_be_visible()


def test_a_wrong_password_is_shown_as_an_error(page, open_page, alice):
    open_page("/accounts/login/")
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill("wrong")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("alert")).to_contain_text("correct username and password")


def test_bob_cannot_open_alices_mission(page, open_page, login, alice, bob):
    mission = new_mission(alice, "Alice private quest")
    login(bob)
    response = open_page(f"/missions/{mission.pk}/")
    assert response.status == 404
    expect(page.get_by_text("Alice private quest")).to_have_count(0)
    open_page("/")
    expect(page.get_by_text("Alice private quest")).to_have_count(0)
