"""The pages people use, one module per page group; `pages.py` holds what they share (the
render-a-fragment-or-the-page answer after an action). The agent API is in `quests.api`, the
retention pages in `quests.retention`."""
