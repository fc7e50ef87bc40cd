from django.core.management.base import BaseCommand

from quests.services.demo import seed_demo


class Command(BaseCommand):
    help = "On an empty database, create a demo user and a demo mission with a little history."

    def handle(self, *args, **options):
        result = seed_demo()
        if result:
            username, password = result
            self.stdout.write(f"Demo user created — log in at http://127.0.0.1:8000/accounts/login/ as {username} / {password}")
