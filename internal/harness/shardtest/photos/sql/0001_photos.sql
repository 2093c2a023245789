-- The tests' per-shard tables: photos keyed by their owner, likes
-- co-located with their photo, follows keyed by the follower. Every
-- package's database tests run on these; a test that needs more adds its
-- own files beside them (photos.With), named for what they add.
CREATE TABLE photos (
    id         bigint  PRIMARY KEY DEFAULT next_id(),
    user_id    bigint  NOT NULL,
    caption    text    NOT NULL DEFAULT '',
    likes      integer NOT NULL DEFAULT 0,
    version    integer NOT NULL DEFAULT 0,
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
