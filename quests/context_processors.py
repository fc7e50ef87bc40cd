from django.conf import settings
from django.http import HttpRequest

from quests.services.inbox import inbox_count


def inbox_badge(user, *, oob: bool = False) -> dict:
    """What the navigation's inbox badge (quests/_inbox_count.html) shows and how often it asks again."""
    return {"inbox_count": inbox_count(user), "inbox_poll_every": settings.QUESTLOG_POLL_SECONDS["inbox"], "oob": oob}


def navigation(request: HttpRequest) -> dict:
    """The inbox count shown in the navigation on every page, and the poll intervals."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {**inbox_badge(user), "poll_seconds": settings.QUESTLOG_POLL_SECONDS}
