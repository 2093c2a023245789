-- Version 2, for the tests of migrate: a new table and a new column.
CREATE TABLE comments (
    id         bigint PRIMARY KEY DEFAULT next_id(),
    user_id    bigint NOT NULL,
    photo_id   bigint NOT NULL,
    body       text   NOT NULL
);
ALTER TABLE photos ADD COLUMN width integer;
