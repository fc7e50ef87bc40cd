"""`make screenshots`: a PNG of each page, at desktop and phone width, under var/screenshots/.

Runs on a throwaway SQLite database in a temporary folder (never the one `make run` uses), fills it
with the demo mission and a few more quests in different states, serves it with runserver on a free
port, and drives Debian's Chromium through Playwright.
"""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import timedelta
from pathlib import Path

from quests.services import milestones

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "var" / "screenshots"
# The README shows these, at both widths.
README_IMAGES = ROOT / "docs" / "images"
README_SHOTS = ("board", "mission-approval", "mission-restored", "mission-long")
WIDTHS = {"desktop": {"width": 1280, "height": 900}, "phone": {"width": 390, "height": 844}}
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def seed() -> dict[str, int]:
    """The demo quest plus quests that show every state a person meets. Returns ids to visit."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from quests.models import Mission
    from quests.services import approvals, missions, operations, records, runs, tokens
    from quests.services.audit import Actor
    from quests.services.demo import seed_demo

    seed_demo()
    User = get_user_model()
    demo = User.objects.get(username="demo")
    demo.is_staff = True
    demo.save(update_fields=["is_staff"])
    User.objects.create_user("newcomer", password="newcomer-password")
    person = Actor(user=demo)
    token, _ = tokens.token_create(user=demo, name="offsite-agent")
    agent = Actor(user=demo, token=token)
    tokens.token_create(user=demo, name="old laptop agent")
    tokens.token_revoke(user=demo, token_id=tokens.token_create(user=demo, name="retired agent")[0].pk)
    offsite = Mission.objects.get(owner=demo)
    seed_more_quests(agent)  # first, so the board's first page opens on the quests below

    # A deployment waiting for approval, with a correction already made earlier.
    deploy, _ = missions.mission_create(
        actor=agent,
        title="Ship the pricing page",
        objective="Update the pricing page copy and deploy it to production.",
        constraints=["Never deploy on a Friday"],
        planned_milestones=[
            {"kind": "draft_ready", "title": "Copy drafted"},
            {"kind": "data_verified", "title": "Prices checked"},
            {"kind": "deployment_paused", "title": "Deployed"},
        ],
    )
    run, _ = runs.run_start(actor=agent, mission_id=deploy.pk, agent="release-bot")
    records.record_create(actor=agent, run_id=run.pk, kind="decision", text="Keep the three-tier layout; only the copy changes.")
    draft, _ = milestones.milestone_claim(
        actor=agent, run_id=run.pk, kind="draft_ready", title="Copy drafted", summary="New copy for all three tiers.", agent_state={"step": "draft"}
    )
    milestones.milestone_review(actor=person, milestone_id=draft.pk, action="approve")
    prices, _ = milestones.milestone_claim(
        actor=agent, run_id=run.pk, kind="data_verified", title="Prices checked", summary="Prices match the billing system.", agent_state={"step": "verify"}
    )
    milestones.milestone_review(actor=person, milestone_id=prices.pk, action="correct", note="Show prices including VAT")
    approvals.approval_request(
        actor=agent,
        run_id=run.pk,
        action="deploy to production",
        payload={"environment": "production", "version": "2024.05.2", "canary": True},
        reason="The copy is approved and prices are checked; deploying changes the public site.",
        agent_state={"step": "deploy"},
    )

    # A mission blocked on an outside service.
    crm, _ = missions.mission_create(actor=agent, title="Sync the CRM contacts", objective="Copy new sign-ups into the CRM every evening.")
    run, _ = runs.run_start(actor=agent, mission_id=crm.pk, agent="sync-bot")
    runs.run_stop(
        actor=agent, run_id=run.pk, reason="blocked_external", detail="CRM unreachable", retry_at=timezone.now().replace(hour=14, minute=0) + timedelta(days=1)
    )

    # A running mission (no worker runs here, so it stays running while the pictures are taken).
    report, _ = missions.mission_create(
        actor=agent,
        title="Write the quarterly report",
        objective="Draft the Q2 report from the finance sheets.",
        planned_milestones=[{"kind": "research_complete", "title": "Numbers gathered"}, {"kind": "draft_ready", "title": "Draft ready"}],
    )
    run, _ = runs.run_start(actor=agent, mission_id=report.pk, agent="writer")
    gathered, _ = milestones.milestone_claim(actor=agent, run_id=run.pk, kind="research_complete", title="Numbers gathered", agent_state={"step": 1})
    milestones.milestone_review(actor=person, milestone_id=gathered.pk, action="approve")
    records.record_create(actor=agent, run_id=run.pk, kind="open_question", text="Should the report include the Berlin office?")

    # A mission restored to its last verified checkpoint: the tree branches.
    trip, _ = missions.mission_create(
        actor=agent,
        title="Book the Lisbon trip",
        objective="Flights and a hotel for the conference in June.",
        constraints=["Direct flights only"],
        planned_milestones=[{"kind": "plan_approved", "title": "Plan approved"}],
    )
    run, _ = runs.run_start(actor=agent, mission_id=trip.pk, agent="travel-bot")
    records.checkpoint_create(actor=agent, run_id=run.pk, agent_state={"step": "search"})
    plan, _ = milestones.milestone_claim(
        actor=agent,
        run_id=run.pk,
        kind="plan_approved",
        title="Plan approved",
        summary="TAP direct, Hotel Avenida.",
        agent_state={"step": "plan", "hotel": "Avenida"},
    )
    milestones.milestone_review(actor=person, milestone_id=plan.pk, action="approve")
    op, _ = operations.operation_plan(actor=agent, run_id=run.pk, key="flight-tap-1", kind="flight.book", target="TAP TP1351", request={"passengers": 1})
    operations.operation_attempt(actor=agent, operation_id=op.pk)
    operations.operation_complete(actor=agent, operation_id=op.pk, external_id="PNR-7QX2", external_status="confirmed", receipt={"price": "312 EUR"})
    # A receipt as providers write them (long ids, several fields), so the ledger's layout shows.
    op, _ = operations.operation_plan(
        actor=agent, run_id=run.pk, key="hotel-avenida-1", kind="hotel.book", target="Hotel Avenida Palace, Lisbon", request={"nights": 3}
    )
    operations.operation_attempt(actor=agent, operation_id=op.pk)
    operations.operation_complete(
        actor=agent,
        operation_id=op.pk,
        external_id="booking_7f3c9e21a4b84d0f9c61e2d5a8b3f0c7",
        external_status="confirmed",
        receipt={
            "confirmation": "HTL-2024-06-LIS-88213457",
            "room": "Double, city view",
            "total": "486 EUR",
            "cancellation": "Free until 48 hours before arrival",
        },
    )
    records.record_create(actor=agent, run_id=run.pk, kind="decision", text="Switch to Hotel Miradouro (cheaper).")
    records.checkpoint_create(actor=agent, run_id=run.pk, agent_state={"step": "hotel", "hotel": "Miradouro"})
    missions.mission_pause(actor=person, mission_id=trip.pk)
    trip.refresh_from_db()
    missions.mission_restore(actor=person, mission_id=trip.pk, checkpoint_id=trip.last_verified_checkpoint_id)

    # A finished one.
    done, _ = missions.mission_create(
        actor=agent, title="Renew the domain", objective="Renew questlog.example for two years.", planned_milestones=[{"kind": "custom", "title": "Renewed"}]
    )
    run, _ = runs.run_start(actor=agent, mission_id=done.pk, agent="ops-bot")
    renewed, _ = milestones.milestone_claim(actor=agent, run_id=run.pk, kind="custom", title="Renewed", agent_state={})
    milestones.milestone_review(actor=person, milestone_id=renewed.pk, action="approve")
    runs.run_stop(actor=agent, run_id=run.pk, reason="completed", detail="Renewed until 2027.")

    long_history = seed_long_history(agent, person)

    trip.refresh_from_db()
    return {"offsite": offsite.pk, "deploy": deploy.pk, "trip": trip.pk, "restore_cp": trip.head_checkpoint_id, "long": long_history}


def seed_long_history(agent, person) -> int:
    """A mission that has run for months: a few hundred checkpoints over many runs, verified
    milestones along the way and two restores, so the pictures show the windowed history."""
    from quests.models import Mission
    from quests.services import missions, records, runs

    nightly, _ = missions.mission_create(
        actor=agent,
        title="Nightly warehouse sync",
        objective="Load yesterday's orders into the warehouse every night and flag gaps.",
        constraints=["Never delete rows in the warehouse"],
    )
    for night in range(1, 31):
        run, _ = runs.run_start(actor=agent, mission_id=nightly.pk, agent="sync-bot")
        for step in range(7):
            records.checkpoint_create(actor=agent, run_id=run.pk, agent_state={"night": night, "step": step})
        if night % 6 == 0:
            loaded, _ = milestones.milestone_claim(
                actor=agent,
                run_id=run.pk,
                kind="data_verified",
                title=f"Week {night // 6} loaded",
                agent_state={"night": night},
            )
            milestones.milestone_review(actor=person, milestone_id=loaded.pk, action="approve")
        if night in (14, 26):
            missions.mission_pause(actor=person, mission_id=nightly.pk)
            nightly.refresh_from_db()
            missions.mission_restore(actor=person, mission_id=nightly.pk, checkpoint_id=nightly.last_verified_checkpoint_id)
        else:
            # Between nights the agent waits for the next export, as an outside dependency.
            runs.run_stop(actor=agent, run_id=run.pk, reason="blocked_external", detail=f"Night {night} loaded; waiting for the next export.")
    return Mission.objects.get(pk=nightly.pk).pk


def seed_more_quests(agent) -> None:
    """Enough quests that the board pages (the oldest activity, on its last page)."""
    from quests.services import missions

    for n in range(1, 31):
        missions.mission_create(actor=agent, title=f"Weekly digest #{n}", objective="Summarise the week's support tickets for the team.")


def main() -> int:
    chromium = shutil.which("chromium")
    if chromium is None:
        print("screenshots: Debian's chromium is not installed (apt-get install chromium).", file=sys.stderr)
        return 1
    work = Path(tempfile.mkdtemp(prefix="questlog-shots-"))
    env = {**os.environ, "QUESTLOG_DATA_DIR": str(work), "CELERY_BROKER_URL": "filesystem://", "DJANGO_DEBUG": "true"}
    env.pop("DATABASE_URL", None)
    os.environ.clear()
    os.environ.update(env)
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    ids = seed()
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"{base}/accounts/login/", timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        OUT.mkdir(parents=True, exist_ok=True)
        shoot(base, chromium, ids)
    finally:
        server.terminate()
        server.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)
    publish()
    print(f"screenshots: saved under {OUT.relative_to(ROOT)}/; the README's under {README_IMAGES.relative_to(ROOT)}/")
    return 0


def shoot(base: str, chromium: str, ids: dict[str, int]) -> None:
    from playwright.sync_api import sync_playwright

    pages = [
        ("board", "/"),
        ("mission", f"/missions/{ids['offsite']}/"),
        ("mission-approval", f"/missions/{ids['deploy']}/"),
        ("mission-restored", f"/missions/{ids['trip']}/"),
        ("mission-long", f"/missions/{ids['long']}/"),
        ("checkpoint", f"/checkpoints/{ids['restore_cp']}/"),
        ("approvals", "/approvals/"),
        ("tokens", "/tokens/"),
        ("memory", "/memory/"),
        ("retention", "/staff/retention/"),
    ]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        for size_name, viewport in WIDTHS.items():
            context = browser.new_context(viewport=viewport)
            page = context.new_page()
            page.goto(f"{base}/accounts/login/")
            page.screenshot(path=OUT / f"login-{size_name}.png", full_page=True)
            login(page, base, "demo", "questlog-demo")
            for name, path in pages:
                response = page.goto(base + path)
                if response is None or response.status != 200:
                    print(f"screenshots: skipped {path} ({response.status if response else 'no answer'})")
                    continue
                page.screenshot(path=OUT / f"{name}-{size_name}.png", full_page=True)
            context.close()
            context = browser.new_context(viewport=viewport)
            page = context.new_page()
            login(page, base, "newcomer", "newcomer-password")
            page.screenshot(path=OUT / f"board-empty-{size_name}.png", full_page=True)
            context.close()
        browser.close()


def publish() -> None:
    README_IMAGES.mkdir(parents=True, exist_ok=True)
    for name in README_SHOTS:
        for size_name in WIDTHS:
            shutil.copyfile(OUT / f"{name}-{size_name}.png", README_IMAGES / f"{name}-{size_name}.png")


def login(page, base: str, username: str, password: str) -> None:
    page.goto(f"{base}/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{base}/")


if __name__ == "__main__":
    raise SystemExit(main())
