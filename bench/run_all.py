"""Run every bench/bench_*.py in turn, then bench/load.py (HTTP load, 8 agents for 60 s), each in a
process of its own (each sets Django up itself), and fail if any of them fails.

    .venv/bin/python bench/run_all.py       (what `make bench` runs; BENCH_QUICK=1 for a smoke run)
"""

import subprocess
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent


def main() -> int:
    scripts = [*sorted(BENCH_DIR.glob("bench_*.py")), BENCH_DIR / "load.py"]
    if not scripts:
        print("no bench/bench_*.py found")
        return 1
    failed: list[str] = []
    total = time.perf_counter()
    for script in scripts:
        print(f"\n######## {script.name}", flush=True)
        start = time.perf_counter()
        result = subprocess.run([sys.executable, str(script)], cwd=BENCH_DIR.parent)
        status = "ok" if result.returncode == 0 else f"FAILED (exit {result.returncode})"
        print(f"######## {script.name}: {status} in {time.perf_counter() - start:.0f} s", flush=True)
        if result.returncode != 0:
            failed.append(script.name)
    print(f"\n{len(scripts) - len(failed)} of {len(scripts)} benchmarks ran in {time.perf_counter() - total:.0f} s", flush=True)
    if failed:
        print("failed: " + ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
