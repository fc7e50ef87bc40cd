"""Test-only instrumentation for the processes tests/test_celery_worker.py starts, so that nothing
on a production path exists for the tests' sake. It runs a command after installing one probe:

    python -m tests.process_probes hold-snapshots -m celery -A config worker …
    python -m tests.process_probes record-sleeps manage.py runserver …

hold-snapshots: a background snapshot, once it has written its checkpoint (inside the transaction
that holds the mission's row lock, before the commit), says so on stdout and waits there, so the
test can SIGKILL the worker at exactly that point.

record-sleeps: every time.sleep() in the process is reported on stderr with its duration and the
module that asked for it, before it sleeps. A publish that backs off on a broker that is down
sleeps (kombu's retry intervals); one that fails fast never does, however loaded the machine is.
"""

import runpy
import sys
import threading
import time

SNAPSHOT_HELD = "process_probes: background checkpoint written; commit held"
SLEPT = "process_probes: sleep"
HOLD_AT_MOST = 300  # seconds; the test kills the worker long before, this only bounds a leak


def hold_snapshots() -> None:
    from django.db.models.signals import post_save

    def hold(sender, instance, created: bool, **kwargs) -> None:
        if created and instance.trigger == "background":
            print(SNAPSHOT_HELD, file=sys.__stdout__, flush=True)
            threading.Event().wait(HOLD_AT_MOST)

    # A lazy sender: the model is resolved once the worker has set Django up.
    post_save.connect(hold, sender="checkpoints.Checkpoint", weak=False)


def record_sleeps() -> None:
    # Installed before anything else is imported, so that `from time import sleep` (kombu) binds it too.
    real_sleep = time.sleep

    def sleep(seconds: float) -> None:
        caller = sys._getframe(1).f_globals.get("__name__", "?")
        print(f"{SLEPT} {float(seconds):.3f}s in {caller}", file=sys.__stderr__, flush=True)
        real_sleep(seconds)

    time.sleep = sleep


PROBES = {"hold-snapshots": hold_snapshots, "record-sleeps": record_sleeps}


def main(argv: list[str]) -> None:
    probe, *command = argv
    PROBES[probe]()
    if command[0] == "-m":
        sys.argv = [command[1], *command[2:]]
        runpy.run_module(command[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = command
        runpy.run_path(command[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
