"""Browser tests: pytest-playwright against pytest-django's live_server, driving Debian's Chromium
(never a browser Playwright downloads). With CI=true a missing Chromium fails the run."""

import os
import shutil
from pathlib import Path

import pytest
from django.test import Client

from tests.builders import fast_password_hashing  # noqa: F401

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


HERE = Path(__file__).resolve().parent


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Playwright's sync API marks an event loop as running in this thread; the browser tests still
    talk to the database synchronously (building data, checking it), which Django refuses unless
    DJANGO_ALLOW_ASYNC_UNSAFE is set. It is set around each browser test only: its setup (where
    the session's test database may be created after Playwright started), call and teardown (the
    flush of a transactional test, and at the very end Playwright's own shutdown). A fixture would
    come too late: session fixtures are set up before any function-scoped one. The hook is called
    for every test (pytest and xdist call it globally), hence the check of the test's path."""
    if not item.path.is_relative_to(HERE):
        return (yield)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        return (yield)


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
