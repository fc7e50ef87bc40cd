# Questlog — the two commands a newcomer needs are `make run` and `make test`.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export QUESTLOG_DATA_DIR ?= $(CURDIR)/var

.PHONY: install run serve test test-long test-fast lint bench demo screenshots migrate worker beat clean

NODE_STAMP := node_modules/.installed

install: $(STAMP) $(NODE_STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || "$$(scripts/find-python)" -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# openapi-typescript (package.json, pinned by package-lock.json) for tests/test_openapi_generators.py.
# Without npm the rest installs and that test says what is missing.
$(NODE_STAMP): package.json package-lock.json
	@if command -v npm >/dev/null 2>&1; then npm ci --silent --no-audit --no-fund && touch $@; \
	else echo "npm not found: tests/test_openapi_generators.py needs node and npm for openapi-typescript"; fi

migrate: install
	@mkdir -p $(QUESTLOG_DATA_DIR)
	$(PY) manage.py migrate --noinput

# Web server, Celery worker and beat together, on the embedded defaults (SQLite + filesystem broker).
run: migrate
	$(PY) manage.py questlog_dev

# The production web server: migrate, then gunicorn (config/gunicorn.py: QUESTLOG_BIND, QUESTLOG_WEB_*)
# with DEBUG off unless DJANGO_DEBUG says otherwise; run `make worker` and `make beat` beside it.
serve: install
	PYTHON=$(PY) scripts/serve

# The suite runs against real PostgreSQL and Redis (concurrency is proven there, not mocked);
# scripts/ensure-services starts or installs them when they are missing. It runs in TEST_WORKERS
# processes (pytest-xdist; 0 runs it in this one): each gets a test database of its own
# (test_questlog_gw0, …) and a Redis database of its own (the broker URL's number plus its index,
# so 10 to 10+TEST_WORKERS-1 here; see tests/conftest.py).
TEST_DATABASE_URL ?= postgres://questlog:questlog@127.0.0.1:5432/questlog
TEST_BROKER_URL ?= redis://127.0.0.1:6379/10
TEST_WORKERS ?= 3
PYTEST := DATABASE_URL=$(TEST_DATABASE_URL) CELERY_BROKER_URL=$(TEST_BROKER_URL) $(PY) -m pytest -p xdist -n $(TEST_WORKERS) --maxschedchunk 2

# ruff (lint with isort, and the formatter's check) and mypy with django-stubs, as pyproject.toml
# configures them; the gates `make test` passes first. `ruff format .` and `ruff check --fix .` fix most.
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The gates, then every test but those marked `long`: within 5 minutes on a 2-core machine.
# `long` marks the tests that must stay slow because they run whole processes end to end (real
# Celery workers, servers, replaycheck, schemathesis at depth) or walk every case (the property run,
# the authorization and security matrices over every route, a crash after every step of a quest):
# `make test-long` runs them, and CI
# (.ci/run) runs `make test` and then `make test-long`, so every test runs there.
test: install lint
	@scripts/ensure-services
	$(PYTEST) -m "not long" $(PYTEST_ARGS)

test-long: install
	@scripts/ensure-services
	$(PYTEST) -m long $(PYTEST_ARGS)

# The unit layer, for while you work: `make test` without the browser tests (Chromium).
test-fast: install
	@scripts/ensure-services
	$(PYTEST) -m "not long and not browser" $(PYTEST_ARGS)

# A PNG of each page at desktop and phone width under var/screenshots/, taken in Debian's Chromium
# from a throwaway database filled with example quests.
screenshots: install
	$(PY) scripts/screenshots.py

bench: install
	$(PY) bench/run_all.py

# A live agent working a quest through the HTTP API; run it beside `make run` and approve in the browser.
demo: install
	$(PY) manage.py demo_agent $(DEMO_ARGS)

worker: install
	$(VENV)/bin/celery -A config worker --loglevel=info

beat: install
	$(VENV)/bin/celery -A config beat --loglevel=info

clean:
	rm -rf $(VENV) var node_modules
