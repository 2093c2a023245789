-- Secondary indexes of version 1 (the shard mover builds them after its copy).
-- A user's photos newest first: IDs grow with time, so id DESC is time order.
CREATE INDEX photos_user_id_id ON photos (user_id, id DESC);
-- One like per user and photo; a photo's likes newest first.
CREATE UNIQUE INDEX likes_photo_user ON likes (photo_id, user_id);
CREATE INDEX likes_photo_id_id ON likes (photo_id, id DESC);
-- One follow per pair; a user's followees.
CREATE UNIQUE INDEX follows_pair ON follows (follower_id, followee_id);
