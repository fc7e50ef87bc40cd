"""Browser tests: pytest-playwright against pytest-django's live_server, driving Debian's Chromium
(never a browser Playwright downloads). With CI=true a missing Chromium fails the run."""

import os
import shutil

import pytest
from django.test import Client

from tests.builders import fast_password_hashing  # noqa: F401

# Playwright's sync API runs an event loop in this thread; the test code still talks to the
# database synchronously (building data, checking it), which Django would otherwise refuse.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    chromium = shutil.which("chromium")
    if chromium is None:
        message = "Debian's chromium is not installed (scripts/ensure-services installs it); the browser tests need it."
        if os.environ.get("CI") == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return {**browser_type_launch_args, "executable_path": chromium, "args": CHROMIUM_ARGS}


@pytest.fixture
def login(context, live_server):
    """Signs a user in for the browser context by handing it a real session cookie."""

    def sign_in(user) -> None:
        client = Client()
        client.force_login(user)
        context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": live_server.url}])

    return sign_in


@pytest.fixture
def open_page(page, live_server):
    """Go to a path of the live server; answers the HTTP response."""

    def go(path: str):
        return page.goto(live_server.url + path)

    return go
