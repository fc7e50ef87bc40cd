"""Every page names its icon, and the icon is served with the static files."""

import pytest
from django.contrib.staticfiles import finders

pytestmark = pytest.mark.django_db


def test_every_page_links_the_favicon(alice_client):
    body = alice_client.get("/").content.decode()
    assert '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in body
    assert finders.find("favicon.svg")
