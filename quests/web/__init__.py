"""The pages people use, one module per page group; `pages.py` holds what they share (the
render-a-fragment-or-the-page answer after an action). The agent API is in `quests.api`, the
retention pages in `quests.retention`."""

from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails


class HtmxHttpRequest(HttpRequest):
    """A request as django-htmx's middleware leaves it: what the type checker knows of `request.htmx`."""

    htmx: HtmxDetails
