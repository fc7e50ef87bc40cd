"""The one rule for "this page may change without the person": a page asks the server whether
what it shows changed only while a quest on it can move without anyone at the page acting. Both
the mission page (one quest) and the board (a page of them) ask it here, so a board of ready quests
sees an agent start one exactly as that quest's own page does."""

from collections.abc import Iterable

from django.conf import settings

from quests.models import MissionStatus
from quests.services import machine


def poll_every(statuses: Iterable[str], *, running: str, idle: str) -> float | None:
    """Seconds between a page's questions "did it change?" for a page showing quests in these
    statuses, or None: no poll. A running agent writes every few seconds (the `running` interval
    of QUESTLOG_POLL_SECONDS); a ready or blocked quest changes when an agent picks it up, at any
    moment but less often (`idle`); any other status moves only when a person acts, and the page
    answering that person swaps itself."""
    shown = set(statuses)
    seconds = settings.QUESTLOG_POLL_SECONDS
    if MissionStatus.RUNNING in shown:
        return seconds[running]
    if shown & machine.MOVES_UNATTENDED:
        return seconds[idle]
    return None
