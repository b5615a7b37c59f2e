-- A drain an admin asked for, apart from the node's state: a draining node
-- that fails is recorded `down` (its archive is fenced), and the drain must
-- still stand when a registry is rebuilt from here after Redis forgets.
ALTER TABLE nodes ADD COLUMN IF NOT EXISTS draining boolean NOT NULL DEFAULT false;
