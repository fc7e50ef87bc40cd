from django.core.management.base import BaseCommand

from quests.services.runs import sweep_stalled_runs


class Command(BaseCommand):
    help = "End every run whose heartbeat is older than QUESTLOG_HEARTBEAT_TIMEOUT as `interrupted`."

    def handle(self, *args, **options):
        ended = sweep_stalled_runs()
        self.stdout.write(f"Ended {ended} stalled run(s).")
