-- Secondary indexes, built by the mover after its copy.
CREATE INDEX photos_user_id ON photos (user_id, id DESC);
CREATE INDEX likes_photo_id ON likes (photo_id);
