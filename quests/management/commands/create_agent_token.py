from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from quests.models import Mission
from quests.services.errors import ServiceError
from quests.services.tokens import token_create


class Command(BaseCommand):
    help = "Create an agent token for USERNAME; the token is printed alone on the last line."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--mission", type=int, help="Limit the token to this mission id.")
        parser.add_argument("--name", default="", help="A name to recognise the token by.")

    def handle(self, *args, username, mission=None, name="", **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user named {username!r}.")
        target = None
        if mission is not None:
            target = Mission.objects.filter(pk=mission, owner=user).first()
            if target is None:
                raise CommandError(f"{username} has no mission with id {mission}.")
        try:
            token, raw = token_create(user=user, name=name, mission=target)
        except ServiceError as exc:
            raise CommandError(exc.message) from exc
        scope = f"mission {target.pk}" if target else "all of the user's missions"
        self.stderr.write(f"Token {token.name or token.prefix!r} for {username}, acting on {scope}. It is shown once:")
        self.stdout.write(raw)
