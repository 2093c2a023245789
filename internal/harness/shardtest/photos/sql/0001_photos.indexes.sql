-- Secondary indexes of version 1; a shard move builds them after its copy.
CREATE INDEX photos_user_id ON photos (user_id, id DESC);
CREATE INDEX likes_photo_id ON likes (photo_id);
CREATE UNIQUE INDEX follows_pair ON follows (user_id, followee_id);
