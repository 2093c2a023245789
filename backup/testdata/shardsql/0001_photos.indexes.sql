CREATE INDEX photos_user_id ON photos (user_id, id DESC);
