-- Every node gets a number that is never given to another address, not even
-- after the node is removed or Redis forgot everything: session mappings in
-- Redis name their node by this number (a few bytes instead of an address),
-- and replicas remember number -> address for good.
CREATE SEQUENCE IF NOT EXISTS node_numbers;
ALTER TABLE nodes ADD COLUMN IF NOT EXISTS number BIGINT NOT NULL DEFAULT nextval('node_numbers');
