-- Tables of the plugin's tests: photos keyed by user, likes co-located
-- with their photo.
CREATE TABLE photos (
    id         bigint PRIMARY KEY DEFAULT next_id(),
    user_id    bigint NOT NULL,
    caption    text   NOT NULL DEFAULT '',
    likes      integer NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX photos_user_id ON photos (user_id, id DESC);

CREATE TABLE likes (
    id         bigint PRIMARY KEY DEFAULT next_id(),
    user_id    bigint NOT NULL,
    photo_id   bigint NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX likes_photo_id ON likes (photo_id);
