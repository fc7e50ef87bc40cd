from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from quests.services.inbox import inbox_count


def navigation(request: HttpRequest) -> dict:
    """The inbox count shown in the navigation on every page. Counted only when the template shows
    it: a page that has counted the inbox already (the inbox) puts its own `inbox_count` in its
    context, and this one is never evaluated."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"inbox_count": SimpleLazyObject(lambda: inbox_count(user))}
