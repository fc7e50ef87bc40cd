"""Retention: how long state is kept and how it is forgotten.

The seed's privacy rule, in one package: recoverable working state disappears once its quest has
ended (after the staff's grace period), long-term memory holds only what a person chose to keep,
and nothing held by staff is ever purged.

- `services/expiry.py`  when a mission's working state expires; the owner's keep/withdraw choice
- `services/policy.py`  the staff policy in force (older versions kept as history); staff access
- `services/holds.py`   staff holds: held state is never purged
- `services/purge.py`   the batched purge and the owner's "delete now"
- `services/export.py`  a person's export of everything Questlog holds about them
- `views.py`, `urls.py`, `forms.py`  the pages; `tasks.py` the periodic purge
"""
