-- Test tables: a table with next_id() keys and columns of many types (their
-- text forms feed the checksums), and one without an id column.
CREATE TABLE photos (
    id      bigint PRIMARY KEY DEFAULT next_id(),
    user_id bigint NOT NULL,
    caption text   NOT NULL DEFAULT '',
    taken   timestamptz NOT NULL DEFAULT now(),
    score   double precision,
    price   numeric(12, 3),
    raw     bytea,
    meta    jsonb
);

CREATE TABLE tags (
    photo_id bigint NOT NULL,
    tag      text   NOT NULL,
    PRIMARY KEY (photo_id, tag)
);
