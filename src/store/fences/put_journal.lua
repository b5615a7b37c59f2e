-- Writes a clean's journal ARGV[2] into KEYS[2] under the node's lock
-- (guard.lua first), unless one is there. Returns 1 if written.
return redis.call('SET', KEYS[2], ARGV[2], 'NX') and 1 or 0
