from django.http import HttpRequest

from quests.services.inbox import inbox_count


def navigation(request: HttpRequest) -> dict:
    """The inbox count shown in the navigation on every page."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"inbox_count": inbox_count(user)}
