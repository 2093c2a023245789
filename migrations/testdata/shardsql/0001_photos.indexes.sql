-- Secondary indexes of version 1; the shard mover builds these after its copy.
CREATE INDEX photos_user_id ON photos (user_id, id DESC);
CREATE INDEX likes_photo_id ON likes (photo_id);
CREATE UNIQUE INDEX follows_pair ON follows (user_id, followee_id);
