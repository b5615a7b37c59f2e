-- Shared by every script that touches session mappings (prepended by
-- `SessionStore::connect`). The layout is in store/mod.rs.

-- The bucket a session's mapping lives in: the first four hex digits of
-- SHA-1(id), 65,536 buckets (`mapping_bucket` in sessions.rs agrees).
local function mapping_key(prefix, id)
  return prefix .. 'mappings:' .. string.sub(redis.sha1hex(id), 1, 4)
end

-- A mapping is '{node number}:{base}:{expires at, ms}'; returns the three
-- parts as strings (nil if the value is not one).
local function unpack_mapping(value)
  return string.match(value, '^(%d+):(%-?%d+):(%-?%d+)$')
end

-- The list of a node's sessions that expire within one second.
local function expiring_key(prefix, number, second)
  return prefix .. 'expiring:' .. number .. ':' .. second
end

local function second_of(exp_ms)
  return string.format('%d', math.floor(tonumber(exp_ms) / 1000))
end
