-- One followers row per pair; a user's followers.
CREATE UNIQUE INDEX followers_pair ON followers (followee_id, follower_id);
