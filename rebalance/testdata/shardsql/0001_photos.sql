-- Test application tables: photos and likes, keyed by user.
CREATE TABLE photos (
    id         bigint PRIMARY KEY DEFAULT next_id(),
    user_id    bigint NOT NULL,
    caption    text   NOT NULL DEFAULT '',
    version    integer NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE likes (
    id         bigint PRIMARY KEY DEFAULT next_id(),
    user_id    bigint NOT NULL,
    photo_id   bigint NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
