-- A node without clean tokens declared down because a /clean to it timed
-- out: that clean may still reach it after it serves again, so health
-- checks do not bring it back, only an admin's add. The hold must still
-- stand when a registry is rebuilt from here after Redis forgets.
ALTER TABLE nodes ADD COLUMN IF NOT EXISTS held_down boolean NOT NULL DEFAULT false;
