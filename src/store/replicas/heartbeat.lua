-- Records that replica ARGV[1] is alive at now (redis_now.lua first) in
-- KEYS[1] replicas, and forgets replicas silent for an hour.
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - 3600000)
return 0
