-- Issue 40 (sign-in): what every API process on one store must agree on about browser
-- sign-ins, so a restart or a second `serve` sees it (jobtrail/identity/ledger.py).
-- `login_states`: one row when an OpenID Connect login starts (`claim` = '') and the claim of
-- the callback that completed it: a login state is used once. Only a SHA-256 of the state is
-- kept; its nonce and PKCE verifier stay in the browser's signed cookie. A claim is inserted
-- with a deduplication token per state, so of two callbacks racing on one state a single
-- claim row is ever stored, and the callback that reads back its own claim alone wins.
-- `session_revocations`: the SHA-256 of each logged-out session's id, until that session
-- would have expired anyway (the hour after covers clocks that disagree).
-- slow mutation: no
CREATE TABLE IF NOT EXISTS login_states
(
    state_hash String,
    claim String,
    at DateTime64(3, 'UTC'),
    expires_at DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree
ORDER BY (state_hash, claim)
TTL toDateTime(expires_at) + INTERVAL 1 HOUR
SETTINGS non_replicated_deduplication_window = 1000;

CREATE TABLE IF NOT EXISTS session_revocations
(
    sid_hash String,
    revoked_at DateTime64(3, 'UTC'),
    expires_at DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree
ORDER BY sid_hash
TTL toDateTime(expires_at) + INTERVAL 1 HOUR
