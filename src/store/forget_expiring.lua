-- Forgets the first N entries of a node's expiry lists for seconds that have
-- passed and whose sessions were archived (entries placed since stay).
-- ARGV: prefix, address, then 'second:N' items (from expiring.lua).
local prefix, addr = ARGV[1], ARGV[2]
local number = redis.call('HGET', prefix .. 'node_numbers', addr)
if not number then
  return 0
end
local seconds_key = prefix .. 'expiring:' .. number
for i = 3, #ARGV do
  local second, n = string.match(ARGV[i], '^(%-?%d+):(%d+)$')
  local list = expiring_key(prefix, number, second)
  redis.call('LTRIM', list, tonumber(n), -1)
  if redis.call('LLEN', list) == 0 then
    redis.call('ZREM', seconds_key, second)
  end
end
return 0
