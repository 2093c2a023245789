-- Backup's own additions to the shared photos schema: a dump's checksums
-- hash each row's text form, so photos gets columns of many types, and
-- tags is a table without an id column (no next_id() sequence to carry).
ALTER TABLE photos
    ADD COLUMN taken timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN score double precision,
    ADD COLUMN price numeric(12, 3),
    ADD COLUMN raw   bytea,
    ADD COLUMN meta  jsonb;

CREATE TABLE tags (
    photo_id bigint NOT NULL,
    tag      text   NOT NULL,
    PRIMARY KEY (photo_id, tag)
);
