-- Albums: a model with soft delete, for the GORM compatibility tests.
CREATE TABLE albums (
    id         bigint PRIMARY KEY DEFAULT next_id(),
    user_id    bigint NOT NULL,
    title      text   NOT NULL DEFAULT '',
    deleted_at timestamptz
);
