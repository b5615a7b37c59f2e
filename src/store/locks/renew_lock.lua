-- Extends lock KEYS[1] to ARGV[2] ms while its holder is ARGV[1].
-- Returns 1 if renewed.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
