"""Every bound on what a person or an agent may send, in one place.

Forms, the API's schemas, the services and docs/api.md read these names, so a limit is never
stated twice and can never disagree with itself (a correction that becomes a constraint is held
to the constraint's length, a page's `maxlength` is the API's `max_length`). Byte limits on whole
request bodies are deployment settings (QUESTLOG_MAX_BODY_BYTES) and live in config/settings.py.
"""

# --- Text, per kind of text ------------------------------------------------------------------

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
