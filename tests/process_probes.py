"""Test-only instrumentation for the processes tests/test_celery_worker.py starts, so that nothing
on a production path exists for the tests' sake. It runs a command after installing one probe:

    python -m tests.process_probes hold-snapshots -m celery -A config worker …
    python -m tests.process_probes record-sleeps manage.py runserver …

hold-snapshots: a background snapshot, once it has written its checkpoint (inside the transaction
that holds the mission's row lock, before the commit), says so on stdout and waits there, so the
test can SIGKILL the worker at exactly that point.

hold-purge: a purge batch, once it has deleted its missions' state (inside the batch's transaction,
before the blobs are released and the batch commits), says so on stdout and waits there, so the test
can SIGKILL the process in the middle of the batch.

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
PURGE_HELD = "process_probes: purge batch deleted its state; commit held"
HOLD_AT_MOST = 300  # seconds; the test kills the worker long before, this only bounds a leak


def hold_snapshots() -> None:
    from celery.signals import worker_init, worker_process_init

    def install(**kwargs) -> None:
        # Once Django is set up in the worker: wrap the function the snapshot task calls to write
        # its checkpoint (its rows are written with their statements sent together, so there is
        # no per-row save signal to hook).
        from quests.services import snapshots

        take = snapshots.take_checkpoint_if_changed

        def take_and_hold(*args, **kw):
            checkpoint = take(*args, **kw)
            if checkpoint is not None:
                print(SNAPSHOT_HELD, file=sys.__stdout__, flush=True)
                threading.Event().wait(HOLD_AT_MOST)
            return checkpoint

        snapshots.take_checkpoint_if_changed = take_and_hold

    worker_init.connect(install, weak=False)
    worker_process_init.connect(install, weak=False)


def hold_purge() -> None:
    # A management command sets Django up itself; the probe wraps the purge once it has.
    import django

    setup = django.setup

    def setup_and_install(*args, **kwargs):
        setup(*args, **kwargs)
        from quests.retention.services import purge

        release = purge.release_blobs

        def hold_then_release(candidates):
            print(PURGE_HELD, file=sys.__stdout__, flush=True)
            threading.Event().wait(HOLD_AT_MOST)
            return release(candidates)

        purge.release_blobs = hold_then_release

    django.setup = setup_and_install


def record_sleeps() -> None:
    # Installed before anything else is imported, so that `from time import sleep` (kombu) binds it too.
    real_sleep = time.sleep

    def sleep(seconds: float) -> None:
        caller = sys._getframe(1).f_globals.get("__name__", "?")
        print(f"{SLEPT} {float(seconds):.3f}s in {caller}", file=sys.__stderr__, flush=True)
        real_sleep(seconds)

    time.sleep = sleep


PROBES = {"hold-snapshots": hold_snapshots, "hold-purge": hold_purge, "record-sleeps": record_sleeps}


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
