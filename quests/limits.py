"""Every bound on what a person or an agent may send, in one place.

Forms, the API's schemas, the services and docs/api.md read these names, so a limit is never
stated twice and can never disagree with itself (a correction that becomes a constraint is held
to the constraint's length, a page's `maxlength` is the API's `max_length`). Byte limits on whole
request bodies are deployment settings (QUESTLOG_MAX_BODY_BYTES) and live in config/settings.py.
"""

# --- Text, per kind of text ------------------------------------------------------------------

# --- Lists and maps: how many items one request may carry ------------------------------------

# --- Free JSON: what any JSON value a client sends must keep to ------------------------------

# How deeply one free JSON value (an agent state, a record's data, an approval's payload, a
# LangGraph channel value, the `filter`, …) may nest: its objects and arrays, itself included
# (quests.storable). Real agent states are far shallower: a LangChain message with tool calls
# is under 10 levels, a parsed API response or a DOM or syntax tree of ordinary depth a few
# dozen. 100 leaves them room while everything that reads the value back stays far from its own
# limit: the export wraps a value in about 8 more levels, and strict JSON readers stop at 128
# (serde_json) or 255 (orjson), Python's recursive encoder and decoder near 1,000.
JSON_DEPTH_MAX = 100
