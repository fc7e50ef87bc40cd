"""The floor of a checkpoint over HTTP on this machine: the benchmark's 12 KB agent checkpoint
POSTed through `questlog_client` (as `bench_vs_langgraph.py` posts it) to a bare WSGI app on the
same gunicorn as `make serve` (gthread, its default workers and threads, the app preloaded) that
reads the body and answers a fixed 201. What remains of a real checkpoint's time over HTTP is
Questlog's own: the p50 wall time and the agent's own CPU time per call are printed (the CPU is
mostly httpx's).

    .venv/bin/python bench/http_floor.py [N]          (N calls after a warm-up; default 1500)

gunicorn imports this module for `app` alone; nothing else runs then."""

import os
import sys

ANSWER = (
    b'{"id":1,"mission_id":1,"run_id":1,"parent_id":null,"seq":1,"trigger":"agent","hash":"0","verified":false,'
    b'"size_bytes":1,"new_bytes":1,"note":"","created_at":"2026-12-05T11:00:00+00:00","compaction_report":{}}'
)


def app(environ, start_response):
    """Reads the request's body, as Django would, and answers what a checkpoint's answer weighs."""
    environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
    start_response("201 Created", [("Content-Type", "application/json"), ("Content-Length", str(len(ANSWER)))])
    return [ANSWER]


def main() -> None:
    import statistics
    import subprocess
    import time
    import uuid

    import common

    common.setup()

    import httpx
    import server

    from config.deploy import web_threads, web_workers
    from questlog_client.core import Connection

    calls = int(next((a for a in sys.argv[1:] if a.isdigit()), "1500"))
    workers, threads = web_workers(os.environ), web_threads(os.environ)  # make serve's (config/gunicorn.py)
    port = server.free_port()
    command = [sys.executable, "-m", "gunicorn", "-k", "gthread", "-w", str(workers), "--threads", str(threads)]
    command += ["--preload", "-b", f"127.0.0.1:{port}", "--chdir", str(common.ROOT / "bench"), "http_floor:app"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.post(url, content=b"{}", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        common.note(f"bare app: gunicorn gthread, {workers} workers of {threads} threads, PID {process.pid}")
        connection = Connection(url, "qlt_floor")
        state = common.AgentState(keys=20, key_bytes=500, seed=1)
        took, cpu = [], []
        for i in range(calls + 100):
            body = {"agent_state": state.next()[0], "key": uuid.uuid4().hex}
            start, start_cpu = time.perf_counter(), time.thread_time()
            connection.request("POST", "runs/1/checkpoints", body)
            if i >= 100:  # the first calls open the connection and warm both sides
                cpu.append((time.thread_time() - start_cpu) * 1000)
                took.append((time.perf_counter() - start) * 1000)
        connection.close()
    finally:
        process.terminate()  # the server this script started, by its PID
        process.wait(timeout=20)
    print(
        f"12 KB checkpoint to a bare WSGI app over HTTP, {calls} calls: wall p50 {statistics.median(took):.3f} ms, agent CPU p50 {statistics.median(cpu):.3f} ms"
    )
    common.load_note()


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
