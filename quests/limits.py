"""Every bound on what a person or an agent may send, in one place.

Forms, the API's schemas, the services and docs/api.md read these names, so a limit is never
stated twice and can never disagree with itself (a correction that becomes a constraint is held
to the constraint's length, a page's `maxlength` is the API's `max_length`). Byte limits on whole
request bodies are deployment settings (QUESTLOG_MAX_BODY_BYTES) and live in config/settings.py.
"""

# --- Text, per kind of text ------------------------------------------------------------------

# --- Lists and maps: how many items one request may carry ------------------------------------

# --- Free JSON: what any JSON value a client sends must keep to ------------------------------
