-- A replica's view of where new sessions may go, on a cluster (store/sessions/view.rs):
-- the counts this replica moved since it last asked are applied first, then
-- the up nodes are read with their scores, so the replica chooses among
-- them itself, without a call to the control slot per new session. The
-- mapping is still created only by claim.lua, in the session's own slot.
--
-- KEYS[1] placeable (up nodes by active sessions), KEYS[2] registry epoch,
-- KEYS[3] counts, KEYS[4] node_numbers, KEYS[5] weights.
-- ARGV: address/delta pairs, each moving a registered node's count (never
-- below zero; `set_count`).
-- Returns, as strings: '1' if the registry is complete (else '0'), then
-- for each up node, lowest score first (ties by name, as `ZRANGE` orders
-- them): its address, its score, its number and its weight.
for i = 1, #ARGV, 2 do
  set_count(KEYS[1], KEYS[3], KEYS[5], ARGV[i], tonumber(ARGV[i + 1]), true)
end
local view = {tostring(redis.call('EXISTS', KEYS[2]))}
local up = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #up, 2 do
  local addr = up[i]
  view[#view + 1] = addr
  view[#view + 1] = up[i + 1]
  view[#view + 1] = redis.call('HGET', KEYS[4], addr) or ''
  view[#view + 1] = redis.call('HGET', KEYS[5], addr) or '1'
end
return view
