-- The replicas (KEYS[1]) heard from within ARGV[1] ms of now (redis_now.lua
-- first).
return redis.call('ZRANGEBYSCORE', KEYS[1], now - tonumber(ARGV[1]), '+inf')
