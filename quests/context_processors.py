from django.http import HttpRequest


def navigation(request: HttpRequest) -> dict:
    """The inbox count shown in the navigation on every page."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    from quests.services.inbox import inbox_count

    return {"inbox_count": inbox_count(user)}
