"""Technical snapshots taken in the background (see the background-work issue)."""

from quests.models import Mission


def snapshot_request(mission: Mission) -> None:
    """Ask for a background snapshot of the mission. Filled in by the background-work layer."""
