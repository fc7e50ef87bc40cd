"""`python manage.py purge_expired [--dry-run] [--as-of ISO-DATETIME]`: the periodic purge, by hand."""

from datetime import datetime

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from quests.retention.services.purge import retention_purge
from quests.services.audit import Actor


def as_of_datetime(raw: str) -> datetime:
    """An ISO date-time (or date); without a zone it is read in the site's time zone."""
    value = parse_datetime(raw)
    if value is None:
        day = parse_date(raw)
        if day is not None:
            value = datetime(day.year, day.month, day.day)
    if value is None:
        raise ValueError(raw)
    return timezone.make_aware(value) if timezone.is_naive(value) else value


class Command(BaseCommand):
    help = "Delete expired working state and expired memory items, batch by batch, and log the purge."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="Count what would be deleted, delete nothing.")
        parser.add_argument("--as-of", metavar="ISO-DATETIME", help="Purge what has expired by this time (default: now).")

    def handle(self, *args, dry_run: bool, as_of: str | None, **options) -> None:
        when = None
        if as_of:
            try:
                when = as_of_datetime(as_of)
            except ValueError:
                raise CommandError(f"--as-of must be an ISO date-time such as 2027-01-31T12:00:00+00:00, not “{as_of}”.") from None
        log = retention_purge(as_of=when, dry_run=dry_run, trigger="command", actor=Actor(system="purge_expired"))
        verb = "Would delete" if dry_run else "Deleted"
        counts = ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in log.counts.items()) or "nothing"
        self.stdout.write(f"{verb} {counts} (as of {log.as_of.isoformat()}, purge log #{log.pk}).")
