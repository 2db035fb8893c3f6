-- Signed-in dashboard sessions. The cookie holds a random token; only its
-- SHA-256 hash is stored, as for API keys. `key_hash` is the API key the
-- session was opened with: the session works only while that key is valid
-- and still belongs to `tenant_id`. `csrf_token` is put in every form of
-- the session and checked on every POST.
CREATE TABLE dashboard_sessions (
    session_hash TEXT PRIMARY KEY,
    tenant_id    TEXT NOT NULL,
    key_hash     TEXT NOT NULL,
    csrf_token   TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT NOT NULL
);
CREATE INDEX dashboard_sessions_expiry ON dashboard_sessions (expires_at);
