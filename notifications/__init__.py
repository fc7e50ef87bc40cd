"""Reaching people where they are: an outbox of notifications written in the same transaction as
the event that causes them, delivered by Celery as email and as signed webhooks (Standard
Webhooks; a Slack-compatible format), at least once with a stable id per event and channel."""
