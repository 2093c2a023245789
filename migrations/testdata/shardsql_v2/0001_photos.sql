-- Sample application tables for tests: photos, likes, follows.
CREATE TABLE photos (
    id         bigint PRIMARY KEY DEFAULT next_id(),
    user_id    bigint NOT NULL,
    caption    text   NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE likes (
    id         bigint PRIMARY KEY DEFAULT next_id(),
    user_id    bigint NOT NULL,
    photo_id   bigint NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE follows (
    id          bigint PRIMARY KEY DEFAULT next_id(),
    user_id     bigint NOT NULL,
    followee_id bigint NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
