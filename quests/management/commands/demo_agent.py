"""`make demo`: a live agent that works a quest through the real HTTP API while you watch it in
the browser, and waits for you wherever a person must decide."""

import logging

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.urls import NoReverseMatch, reverse

from questlog_client import Questlog, errors
from questlog_client.fake_service import FakeService
from questlog_client.scenarios import demo
from quests.services.tokens import token_create


class Command(BaseCommand):
    help = "Run the demo agent (plan a team offsite) against a running server; approve its steps in the browser."

    def add_arguments(self, parser):
        parser.add_argument("--mission", type=int, help="Resume this mission instead of starting a new one.")
        parser.add_argument("--base-url", default="http://127.0.0.1:8000", help="The running server (make run).")
        parser.add_argument("--token", help="An agent token; by default one is made for --user.")
        parser.add_argument("--user", default="demo", help="Whose agent this is when no --token is given (default: demo).")
        parser.add_argument("--pace", type=float, default=1.0, help="Seconds between steps, so you can watch (default 1).")
        parser.add_argument("--poll", type=float, default=2.0, help="Seconds between looks while it waits for you.")

    def handle(self, *args, mission=None, base_url, token=None, user, pace, poll, **options):
        logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request would drown the story
        base_url = base_url.rstrip("/")
        ql = Questlog(
            base_url,
            token or self._token_for(user),
            poll_interval=poll,
            takeover_timeout=settings.QUESTLOG_HEARTBEAT_TIMEOUT + 30,
        )
        service = FakeService(settings.DATA_DIR / "fake_service.sqlite3")
        quest = None
        try:
            quest = self._quest(ql, mission, base_url)
            page, inbox = _page(base_url, "mission", quest.id), _page(base_url, "inbox")
            self.stdout.write(f"Quest #{quest.id} “{quest.info.title}” — watch it at {page} (signed in as its owner).")

            def say(line: str) -> None:
                hint = f" → decide at {inbox}" if line.startswith("Your turn") else ""
                self.stdout.write(f"  {line}{hint}")

            demo.demo_agent(ql, quest.id, service, say=say, pace=pace)
        except KeyboardInterrupt:
            if quest is not None:
                self.stdout.write(f"\nStopped. Carry on later with: python manage.py demo_agent --mission {quest.id}")
        except errors.QuestlogError as exc:
            raise CommandError(f"The demo agent stopped: {exc}") from exc
        finally:
            ql.close()
        self.stdout.write(f"Side effects at the fake service so far are in {service.path}.")

    def _token_for(self, username: str) -> str:
        owner = get_user_model().objects.filter(username=username).first()
        if owner is None:
            raise CommandError(f"No user {username!r}. `make run` creates the demo user on an empty database; or pass --user or --token.")
        _, raw = token_create(user=owner, name="demo agent")
        return raw

    def _quest(self, ql: Questlog, mission_id: int | None, base_url: str):
        try:
            if mission_id is not None:
                return ql.missions.get(mission_id)
            return ql.missions.create(**demo.MISSION)
        except errors.TransportError as exc:
            raise CommandError(f"No Questlog server answers at {base_url}: start it with `make run` in another terminal.") from exc
        except errors.NotFound as exc:
            raise CommandError(f"No mission {mission_id} for this agent.") from exc


def _page(base_url: str, name: str, *args: int) -> str:
    try:
        return base_url + reverse(name, args=args)
    except NoReverseMatch:
        return base_url + "/"
