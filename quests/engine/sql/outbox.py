"""The outbox: notifications of one kind for one person, with their deliveries, written by the
service that makes their event happen, in its transaction (notifications.events)."""

# The events given (dedupe key, event id, data, in order), the mode (the caller's, else the
# person's preference, else the kind's default), the notifications not emitted before (a
# concurrent twin's insert wins the unique dedupe key: ON CONFLICT, no savepoint), and their
# deliveries: an email when the mode is immediately, and a webhook to each endpoint (the caller's,
# else the person's enabled endpoints that want the kind), as `notifications.events` orders them.
# The notifications come back in their model's field order (`runner.model_from_row`), each with
# the ids of every delivery made.
EMIT_PG = """
WITH given AS (
    SELECT g.dedupe_key, g.event_id, g.data, g.n
      FROM unnest(CAST(%(dedupe_keys)s AS text[]), CAST(%(event_ids)s AS uuid[]), CAST(%(datas)s AS jsonb[]))
           WITH ORDINALITY AS g(dedupe_key, event_id, data, n)
), chosen AS (
    SELECT COALESCE(CAST(%(mode)s AS text),
                    (SELECT p.mode FROM notifications_notificationpreference p
                      WHERE p.owner_id = %(owner_id)s AND p.kind = %(kind)s),
                    %(default_mode)s) AS mode
), made AS (
    INSERT INTO notifications_notification (event_id, owner_id, kind, dedupe_key, mission_id, data, created_at, in_digest, digest_id)
    SELECT given.event_id, %(owner_id)s, %(kind)s, given.dedupe_key, %(mission_id)s, given.data, %(now)s, chosen.mode = 'digest', NULL
      FROM given, chosen
     WHERE NOT EXISTS (SELECT 1 FROM notifications_notification n WHERE n.dedupe_key = given.dedupe_key)
     ORDER BY given.n
        ON CONFLICT (dedupe_key) DO NOTHING
    RETURNING id, event_id, owner_id, kind, dedupe_key, mission_id, data, created_at, in_digest, digest_id
), hooks AS (
    SELECT e.id FROM notifications_webhookendpoint e
     WHERE CASE WHEN CAST(%(endpoint_ids)s AS bigint[]) IS NULL
                THEN e.owner_id = %(owner_id)s AND e.disabled_at IS NULL AND e.events ? %(kind)s
                ELSE e.id = ANY(CAST(%(endpoint_ids)s AS bigint[])) END
), wanted AS (
    SELECT made.id AS notification_id, 'email' AS channel, CAST(NULL AS bigint) AS endpoint_id,
           replace(CAST(made.event_id AS text), '-', '') || '.email' AS message_id
      FROM made, chosen WHERE chosen.mode = 'immediately'
    UNION ALL
    SELECT made.id, 'webhook', hooks.id, 'msg_' || replace(CAST(made.event_id AS text), '-', '') || '_' || hooks.id
      FROM made, hooks
), delivered AS (
    INSERT INTO notifications_delivery (
        notification_id, channel, endpoint_id, message_id, status, attempts, response_status, last_error,
        created_at, first_attempt_at, next_attempt_at, delivered_at, leased_until)
    SELECT notification_id, channel, endpoint_id, message_id, 'pending', 0, NULL, '', %(now)s, NULL, %(now)s, NULL, NULL
      FROM wanted
     ORDER BY notification_id, endpoint_id NULLS FIRST
    RETURNING id
)
SELECT made.*, (SELECT array_agg(id ORDER BY id) FROM delivered)
  FROM made
 ORDER BY made.id"""
