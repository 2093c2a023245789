-- Per-shard tables of the photo-sharing example, applied to every
-- shard_NNNN schema by migrations.Provision. Names are unqualified: the
-- provisioner sets search_path to the shard's schema. next_id() is the
-- shard's own ID function (slot 0), so a raw INSERT without an id still gets
-- an ID with this shard's bits.
--
-- Every table lives on its owner's shard. A user's home shard is in the
-- shard bits of the user's ID, and so is a photo's:
--   users    shard of id           (the user's ID)
--   photos   shard of user_id      (the owner's ID; the photo's ID gets the same bits)
--   likes    shard of photo_id     (the photo's ID)
--   follows  shard of follower_id  (the follower's ID)
--
-- Secondary indexes are in 0001_photos.indexes.sql: a shard move builds
-- them after its copy.

CREATE TABLE users (
    id         bigint PRIMARY KEY DEFAULT next_id(),
    name       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE photos (
    id         bigint PRIMARY KEY DEFAULT next_id(),
    user_id    bigint NOT NULL,
    caption    text NOT NULL DEFAULT '',
    url        text NOT NULL,
    width      integer NOT NULL DEFAULT 0,
    height     integer NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE likes (
    id         bigint PRIMARY KEY DEFAULT next_id(),
    photo_id   bigint NOT NULL,
    user_id    bigint NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE follows (
    id          bigint PRIMARY KEY DEFAULT next_id(),
    follower_id bigint NOT NULL,
    followee_id bigint NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
