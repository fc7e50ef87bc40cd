"""`make run`'s command: where Questlog is and the demo login, framed after the server is up."""

import pytest

from quests.management.commands.questlog_dev import demo_login, ready_banner


def test_the_banner_frames_the_address_and_the_demo_login():
    lines = ready_banner("127.0.0.1:8000", ("demo", "questlog-demo"))
    assert lines[0] == lines[-1] and set(lines[0]) == {"="}
    assert "  Questlog is ready: http://127.0.0.1:8000/" in lines
    assert "  Log in as demo / questlog-demo" in lines
    assert all(len(line) <= len(lines[0]) for line in lines)


def test_without_a_demo_login_the_banner_says_only_where(db):
    assert not any("Log in" in line for line in ready_banner("127.0.0.1:8000", None))


@pytest.mark.django_db
def test_the_demo_login_is_shown_while_it_still_works(django_user_model):
    assert demo_login() == ("demo", "questlog-demo")  # seeded now
    assert demo_login() == ("demo", "questlog-demo")  # seeded on an earlier run
    demo = django_user_model.objects.get(username="demo")
    demo.set_password("changed")
    demo.save()
    assert demo_login() is None
