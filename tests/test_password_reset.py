"""Issue 24, finding 10: Django's password-reset pages were routed with no mail server and no
throttle. They are off until the server sends email (QUESTLOG_PASSWORD_RESET): not routed, and
nothing links to them. Turned on, each reset request is counted per address and per account."""

import importlib
import uuid

import pytest
from django.test import Client
from django.urls import NoReverseMatch, clear_url_caches, reverse

import config.urls

pytestmark = pytest.mark.django_db

RESET_PATHS = ("/accounts/password_reset/", "/accounts/password_reset/done/", "/accounts/reset/MQ/set-password/", "/accounts/reset/done/")


def reload_urls() -> None:
    importlib.reload(config.urls)
    clear_url_caches()


@pytest.fixture
def password_reset_on(settings):
    settings.QUESTLOG_PASSWORD_RESET = True
    settings.QUESTLOG_PASSWORD_RESET_RATE = 3
    reload_urls()
    yield
    settings.QUESTLOG_PASSWORD_RESET = False
    reload_urls()


def a_client() -> Client:
    """A client from an address of its own: the counts live in the shared cache for an hour."""
    return Client(REMOTE_ADDR=f"10.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}")


def an_account(django_user_model):
    email = f"{uuid.uuid4().hex[:12]}@example.com"
    return django_user_model.objects.create_user(email.split("@")[0], email=email, password="pw-12345678")


@pytest.mark.parametrize("path", RESET_PATHS)
def test_without_email_the_password_reset_pages_are_not_routed(client, path):
    assert client.get(path).status_code == 404
    assert client.post(path, {"email": "alice@example.com"}).status_code == 404


def test_without_email_nothing_links_to_a_password_reset(client, django_user_model, mailoutbox):
    for name in ("password_reset", "password_reset_done", "password_reset_complete", "admin_password_reset"):
        with pytest.raises(NoReverseMatch):
            reverse(name)
    for page in ("/accounts/login/", "/admin/login/"):
        body = client.get(page).content.decode()
        assert "reset" not in body.lower() and "forgotten" not in body.lower(), page
    assert not mailoutbox


def test_the_sign_in_pages_django_routed_beside_it_are_still_there(alice_client):
    assert alice_client.get("/accounts/password_change/").status_code == 200
    assert alice_client.get("/accounts/password_change/done/").status_code == 200
    assert alice_client.post("/accounts/logout/").status_code == 302


def test_turned_on_a_reset_request_mails_the_account_a_link(password_reset_on, django_user_model, mailoutbox):
    account = an_account(django_user_model)
    response = a_client().post("/accounts/password_reset/", {"email": account.email})
    assert response.status_code == 302 and response["Location"] == "/accounts/password_reset/done/"
    assert [mail.to for mail in mailoutbox] == [[account.email]]
    assert "/accounts/reset/" in mailoutbox[0].body


def test_turned_on_requests_from_one_address_are_throttled_whatever_the_accounts(password_reset_on, django_user_model, mailoutbox):
    client = a_client()
    accounts = [an_account(django_user_model) for _ in range(4)]
    statuses = [client.post("/accounts/password_reset/", {"email": a.email}).status_code for a in accounts]
    assert statuses == [302, 302, 302, 429]
    assert len(mailoutbox) == 3  # the refused request sent nothing
    refused = client.post("/accounts/password_reset/", {"email": accounts[0].email})
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
    assert "Too many password-reset requests" in refused.content.decode()
    assert a_client().post("/accounts/password_reset/", {"email": accounts[3].email}).status_code == 302  # another address


def test_turned_on_requests_for_one_account_are_throttled_from_any_address(password_reset_on, django_user_model, mailoutbox):
    account = an_account(django_user_model)
    # The same address in any case: Django matches it without regard to case, so does the count.
    emails = [account.email, account.email.upper(), account.email, account.email]
    statuses = [a_client().post("/accounts/password_reset/", {"email": email}).status_code for email in emails]
    assert statuses == [302, 302, 302, 429]
    assert len(mailoutbox) == 3
