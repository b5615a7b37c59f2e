-- Stops a script unless KEYS[1] (a node's lock) still holds ARGV[1] (its
-- holder's token): the writes after it land only while the operation that
-- makes them holds its node (store/locks/mod.rs).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return redis.error_reply('LOCKLOST the node lock is held by another operation')
end
