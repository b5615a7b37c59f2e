-- Shared by every script that touches session mappings (prepended by
-- `SessionStore::connect`). The layout is in store/mod.rs.

-- The bucket a session's mapping lives in, inside its group (ARGV[1] of
-- such a script is the group's key prefix, `P{s:gg}`): the first four hex
-- digits of SHA-1(id) (`mapping_bucket` in groups.rs agrees, and declares
-- the same key).
local function mapping_key(group_prefix, id)
  return group_prefix .. 'mappings:' .. string.sub(redis.sha1hex(id), 1, 4)
end

-- A mapping is '{node number}:{base}:{expires at, ms}'; returns the three
-- parts as strings (nil if the value is not one).
local function unpack_mapping(value)
  return string.match(value, '^(%d+):(%-?%d+):(%-?%d+)$')
end
