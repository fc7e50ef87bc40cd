from django.conf import settings
from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from quests.selectors.people import inbox_count


def inbox_badge(user, *, oob: bool = False, counted: int | None = None) -> dict:
    """What the navigation's inbox badge (quests/_inbox_count.html) shows and how often it asks
    again. The count is taken only when a template shows it, and not at all when the page has
    counted the inbox already (`counted`, the inbox's own total)."""
    count = SimpleLazyObject(lambda: inbox_count(user)) if counted is None else counted
    return {"inbox_count": count, "inbox_poll_every": settings.QUESTLOG_POLL_SECONDS["inbox"], "oob": oob}


def navigation(request: HttpRequest) -> dict:
    """The inbox count shown in the navigation on every page, and the poll intervals. A page that
    counted the inbox already (the inbox) puts its own `inbox_count` in its context, which wins
    over this lazy one: it is never evaluated."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {**inbox_badge(user), "poll_seconds": settings.QUESTLOG_POLL_SECONDS}
