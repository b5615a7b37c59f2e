-- Raises a fence on node ARGV[2], under its lock (guard.lua first), stale
-- ARGV[3] ms from now (redis_now.lua), for reason ARGV[4].
-- KEYS[2] fence_seq, KEYS[3] fences. Returns the fence's sequence number.
local seq = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[3], ARGV[2], seq .. ':' .. (now + tonumber(ARGV[3])) .. ':' .. ARGV[4])
return seq
