# Questlog — the two commands a newcomer needs are `make run` and `make test`.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export QUESTLOG_DATA_DIR ?= $(CURDIR)/var

.PHONY: install run test bench demo screenshots migrate worker beat clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || "$$(scripts/find-python)" -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

migrate: install
	@mkdir -p $(QUESTLOG_DATA_DIR)
	$(PY) manage.py migrate --noinput

# Web server, Celery worker and beat together, on the embedded defaults (SQLite + filesystem broker).
run: migrate
	$(PY) manage.py questlog_dev

# The suite runs against real PostgreSQL and Redis (concurrency is proven there, not mocked);
# scripts/ensure-services starts or installs them when they are missing.
TEST_DATABASE_URL ?= postgres://questlog:questlog@127.0.0.1:5432/questlog
TEST_BROKER_URL ?= redis://127.0.0.1:6379/15

test: install
	@scripts/ensure-services
	DATABASE_URL=$(TEST_DATABASE_URL) CELERY_BROKER_URL=$(TEST_BROKER_URL) $(PY) -m pytest $(PYTEST_ARGS)

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
	$(VENV)/bin/celery -A config worker -Q snapshots,maintenance,celery --loglevel=info

beat: install
	$(VENV)/bin/celery -A config beat --loglevel=info

clean:
	rm -rf $(VENV) var
