-- `now`: Redis's clock in ms. Heartbeats, liveness and fence deadlines are
-- all written and judged on it: one clock, so a replica whose own clock is
-- off cannot make another look dead or a live fence look stale (design.md
-- §4.16). Scripts replicate by their effects (Redis 7), so reading the
-- clock in a script that writes is allowed.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
