-- Registers a node unless it is registered already (adding is idempotent).
-- Refused while the registry epoch is missing (Redis forgot its data and the
-- registry is being rebuilt), unless ARGV[6] is '1' (the rebuild itself).
-- KEYS[1] node hash, KEYS[2] nodes zset (by registration time), KEYS[3]
-- placeable, KEYS[4] registry epoch, KEYS[5] node_numbers (address ->
-- number), KEYS[6] node_addresses (number -> address, kept for good),
-- KEYS[7] counts, KEYS[8] weights.
-- ARGV: address, name, weight, state, now_ms, force, instance, reason, number,
-- fencing epoch (the token of the wipe or archive that preceded it).
-- Returns 1 if added, 0 if known, -1 while the registry is not complete.
if ARGV[6] ~= '1' and redis.call('EXISTS', KEYS[4]) == 0 then
  return -1
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'name', ARGV[2], 'weight', ARGV[3], 'state', ARGV[4],
  'instance', ARGV[7], 'reason', ARGV[8], 'number', ARGV[9], 'epoch', ARGV[10] or '0')
redis.call('HSET', KEYS[7], ARGV[1], 0)
redis.call('HSET', KEYS[8], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[5], ARGV[1], ARGV[9])
redis.call('HSET', KEYS[6], ARGV[9], ARGV[1])
redis.call('ZADD', KEYS[2], ARGV[5], ARGV[1])
if ARGV[4] == 'up' then
  redis.call('ZADD', KEYS[3], 0, ARGV[1])
end
return 1
