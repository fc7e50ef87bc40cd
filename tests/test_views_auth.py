"""Log in and log out, and the demo credentials on the login page in DEBUG only."""

import pytest

from quests.services.demo import DEMO_PASSWORD, DEMO_USERNAME, seed_demo
from tests.builders import fast_password_hashing  # noqa: F401

pytestmark = pytest.mark.django_db


def test_the_login_page_is_styled_and_logs_in(client, alice):
    body = client.get("/accounts/login/").content.decode()
    assert "questlog.css" in body and 'for="id_username"' in body and 'for="id_password"' in body
    response = client.post("/accounts/login/", {"username": "alice", "password": "alice-password"})
    assert response.status_code == 302 and response["Location"] == "/"


def test_a_wrong_password_is_a_form_error(client, alice):
    response = client.post("/accounts/login/", {"username": "alice", "password": "nope"})
    assert response.status_code == 200 and 'role="alert"' in response.content.decode()


def test_log_out_is_a_post_and_returns_to_the_login_page(client, alice):
    client.force_login(alice)
    response = client.post("/accounts/logout/")
    assert response.status_code == 302 and response["Location"] == "/accounts/login/"
    assert client.get("/").status_code == 302


def test_demo_credentials_show_in_debug_only(client, settings):
    seed_demo()
    settings.DEBUG = True
    body = client.get("/accounts/login/").content.decode()
    assert DEMO_USERNAME in body and DEMO_PASSWORD in body
    settings.DEBUG = False
    assert DEMO_PASSWORD not in client.get("/accounts/login/").content.decode()


def test_no_demo_credentials_without_a_demo_user(client, settings):
    settings.DEBUG = True
    assert DEMO_PASSWORD not in client.get("/accounts/login/").content.decode()


def test_the_demo_user_sees_the_demo_mission_first(client, settings):
    seed_demo()
    assert client.login(username=DEMO_USERNAME, password=DEMO_PASSWORD)
    body = client.get("/").content.decode()
    assert "Plan the team offsite" in body and "Waiting for your review of “Venues shortlisted”" in body
