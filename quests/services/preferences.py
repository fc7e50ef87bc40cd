"""A person's own settings for the pages: the time zone their times are shown in."""

import zoneinfo
from datetime import datetime
from functools import cache

from django.db import transaction
from django.utils import dateformat, timezone

from quests.models import PersonSettings
from quests.services.errors import InvalidInput

# The session keeps the person's chosen zone ("" for the browser's), so that no page asks the
# database for it: set at login and whenever the person changes it.
SESSION_TIME_ZONE = "questlog_time_zone"


# The one way a moment is written for a person, in their zone (activated per request by
# quests.middleware.PersonTimeZoneMiddleware) and always with the zone's name: "Dec 3, 2026, 11:03 PST".
MOMENT_FORMAT = "M j, Y, H:i T"


def moment(value: datetime) -> str:
    return dateformat.format(timezone.localtime(value), MOMENT_FORMAT)


@cache
def time_zone_names() -> tuple[str, ...]:
    return tuple(sorted(zoneinfo.available_timezones()))


def time_zone_of(user) -> str:
    """The zone the person chose, or "" (their browser's)."""
    return PersonSettings.objects.filter(user=user).values_list("time_zone", flat=True).first() or ""


def time_zone_set(*, user, name: str) -> PersonSettings:
    """Choose the zone times are shown in; "" goes back to the browser's."""
    name = (name or "").strip()
    if name and name not in time_zone_names():
        raise InvalidInput(f"“{name}” is not a time zone we know. Choose one from the list.", field="time_zone")
    with transaction.atomic():
        chosen, _ = PersonSettings.objects.update_or_create(user=user, defaults={"time_zone": name})
    return chosen


def remember_on_login(sender, request, user, **kwargs) -> None:
    """user_logged_in: the chosen zone goes into the new session."""
    if request is not None and hasattr(request, "session"):
        request.session[SESSION_TIME_ZONE] = time_zone_of(user)
