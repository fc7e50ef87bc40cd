"""Every bound on what a person or an agent may send, in one place.

Forms, the API's schemas, the services and docs/api.md read these names, so a limit is never
stated twice and can never disagree with itself (a correction that becomes a constraint is held
to the constraint's length, a page's `maxlength` is the API's `max_length`). Byte limits on whole
request bodies are deployment settings (QUESTLOG_MAX_BODY_BYTES) and live in config/settings.py.
"""

# --- Text, per kind of text ------------------------------------------------------------------
# Characters, counted as sent. A person's field shows its limit (`maxlength` and a counter, the
# template tag `limit`), the API's schema states it, and the service refuses anything longer.

MISSION_TITLE = 200
PLANNED_MILESTONE_TITLE = 300
MILESTONE_TITLE = 300
# A constraint, whoever writes it. A milestone review's text becomes a constraint, so it is held
# to the same limit: a correction can always be edited later.
CONSTRAINT_TEXT = 2000
REVIEW_NOTE = CONSTRAINT_TEXT
# What a person tells the agent with an approval decision.
DECISION_NOTE = 2000
APPROVAL_ACTION = 500
AGENT_REF = 200
AGENT_NAME = 200
IDEMPOTENCY_KEY = 200
OPERATION_KEY = 200
OPERATION_KIND = 100
OPERATION_TARGET = 500
EXTERNAL_ID = 500
EXTERNAL_STATUS = 100
MEMORY_NAME = 200
TOKEN_NAME = 100

# --- Lists and maps: how many items one request may carry ------------------------------------
# Each bound keeps one request's cost small and linear in its size (issue 24, finding 2): a body
# under the byte limit can otherwise carry hundreds of thousands of items. Every one is low enough
# that a list one item too long still fits the body limit, so it is refused by name (422 `invalid`
# with `field`), never as a 413. docs/api.md's "Input bounds" table lists them all.

# `constraints` of POST /missions: a mission starts with a handful; more are added one by one.
MISSION_CONSTRAINTS_MAX = 100
# `planned_milestones` of POST /missions.
MISSION_PLANNED_MILESTONES_MAX = 50
# Top-level keys of a free-form object (an `agent_state`, `payload`, `data`, `request`, `receipt`,
# a LangGraph `metadata` or `checkpoint`): an agent state is stored one part per top-level key, so
# its keys are what a checkpoint's cost grows with. Nested values are bounded by the body size and
# the JSON nesting depth (below).
OBJECT_KEYS_MAX = 1000
# `items` of POST /runs/{id}/approvals/batch.
APPROVAL_BATCH_ITEMS_MAX = 100
# `evidence` (record ids) of POST /runs/{id}/milestones.
MILESTONE_EVIDENCE_MAX = 100
# LangGraph: `channels` of one checkpoint, `writes` and `interrupts` of one task, the `run_ids`
# and `thread_ids` of one delete or prune.
GRAPH_CHANNELS_MAX = 1000
GRAPH_WRITES_MAX = 1000
GRAPH_INTERRUPTS_MAX = 100
GRAPH_RUN_IDS_MAX = 1000
GRAPH_THREAD_IDS_MAX = 1000
# An operation's receipts (`complete`, `fail`, `observe`) are never refused by the request rate, so
# that the truth about the outside world is never lost; their size and number are bounded instead.
# A receipt object is at most this many bytes as canonical JSON (a provider's answer, not a dump) …
RECEIPT_BYTES_MAX = 64 * 1024
# … and one operation keeps at most this many receipts in its history (a status that changes this
# often is a stream, not a receipt).
RECEIPTS_PER_OPERATION_MAX = 100


# --- Free JSON: what any JSON value a client sends must keep to ------------------------------

# How deeply one free JSON value (an agent state, a record's data, an approval's payload, a
# LangGraph channel value, the `filter`, …) may nest: its objects and arrays, itself included
# (quests.storable). Real agent states are far shallower: a LangChain message with tool calls
# is under 10 levels, a parsed API response or a DOM or syntax tree of ordinary depth a few
# dozen. 100 leaves them room while everything that reads the value back stays far from its own
# limit: the export wraps a value in about 8 more levels, and strict JSON readers stop at 128
# (serde_json) or 255 (orjson), Python's recursive encoder and decoder near 1,000.
JSON_DEPTH_MAX = 100
