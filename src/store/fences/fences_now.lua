-- Every raised fence (KEYS[1] fences), and now on Redis's clock, which
-- their deadlines are on (redis_now.lua first).
return {now, redis.call('HGETALL', KEYS[1])}
