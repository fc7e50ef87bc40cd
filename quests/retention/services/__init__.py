"""Retention services, split by concern; import from the module that owns the rule."""
