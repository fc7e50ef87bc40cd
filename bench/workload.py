"""The workload bench/bench_vs_langgraph.py and its paths over HTTP (bench/over_http.py) run on:
an agent state of KEYS top-level keys of ~KEY_BYTES B, one changed per checkpoint; histories of
HISTORY_SHORT and HISTORY_LONG checkpoints; ROUNDS alternating rounds of SAMPLES calls per path in
process, HTTP_SAMPLES over HTTP; BYTES_N checkpoints after WARM_UP for bytes per checkpoint.
BENCH_QUICK=1 (or --quick) makes every count small: a smoke run."""

import os
import sys

QUICK = os.environ.get("BENCH_QUICK") == "1" or "--quick" in sys.argv

KEYS, KEY_BYTES = 20, 500
HISTORY_SHORT, HISTORY_LONG = 10, (100 if QUICK else 2_000)
BYTES_N = 100 if QUICK else 2_000
WARM_UP = 20
ROUNDS = 2 if QUICK else 6
SAMPLES = 5 if QUICK else 30  # per path per round
HTTP_SAMPLES = 10 if QUICK else 60  # per round
