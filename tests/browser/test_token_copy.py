"""A new token in Chromium: its copy button puts it on the clipboard, and the ready examples carry it."""

import pytest
from playwright.sync_api import expect

from tests.browser.test_undo import WIDTHS, shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("width", WIDTHS, ids=list(WIDTHS))
def test_copy_the_new_token_and_its_examples(page, context, open_page, login, alice, live_server, width):
    page.set_viewport_size(WIDTHS[width])
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    login(alice)
    open_page("/tokens/")
    page.get_by_label("Name").first.fill("laptop agent")
    page.get_by_role("button", name="Create token").click()
    token = page.get_by_label("Your new token").input_value()
    assert token
    page.get_by_role("button", name="Copy", exact=True).click()
    expect(page.locator("#live-announcer")).to_have_text("Token copied")
    assert page.evaluate("navigator.clipboard.readText()") == token
    expect(page.locator("#try-curl")).to_contain_text(f"export QUESTLOG_TOKEN='{token}'")
    expect(page.locator("#try-curl")).to_contain_text(f"{live_server.url}/api/v1/missions")
    expect(page.locator("#try-python")).to_contain_text(f'Questlog("{live_server.url}", os.environ["QUESTLOG_TOKEN"])')
    page.get_by_role("button", name="Copy the Python example").click()
    assert page.evaluate("navigator.clipboard.readText()").startswith("import os\nfrom questlog_client import Questlog")
    shot(page, f"token-copy-{width}")
