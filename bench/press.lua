-- wrk script: POST /press for ids drawn at random from ID_POOL (10000)
-- ids, each with its X-Session-Id header too (what nginx and HAProxy
-- stick on). Requests are formatted once, in init(). With NEW=1 every
-- press is a new id instead (the placement path). done() prints one
-- RESULT line that bench/press-vs-peers.sh reads.
--   wrk -t1 -c64 -d10s -s bench/press.lua http://127.0.0.1:8000
--   NEW=1 wrk -t1 -c64 -d10s -s bench/press.lua http://127.0.0.1:8000
local pool = tonumber(os.getenv("ID_POOL") or "10000")
local prefix = os.getenv("ID_PREFIX") or "bench-"
local new = os.getenv("NEW") == "1"
-- SEQUENTIAL=1: the ids in order, 1 to ID_POOL and again (a warm-up that
-- has pressed as many times as there are ids has placed every one; drawn
-- at random, a tenth of them were still new in the measured run after it).
local sequential = os.getenv("SEQUENTIAL") == "1"
local requests = {}
local counter = 0

local function press(id)
  return wrk.format("POST", "/press",
    { ["Content-Type"] = "application/json", ["X-Session-Id"] = id },
    '{"session_id":"' .. id .. '"}')
end

function init(args)
  math.randomseed(os.time())
  if new then
    -- Two wrk started in the same second draw the same random number:
    -- NEW_TAG tells them apart.
    prefix = string.format("new-%d-%d-%s", os.time(), math.random(1e9), os.getenv("NEW_TAG") or "")
  else
    for i = 1, pool do
      requests[i] = press(prefix .. i)
    end
  end
end

function request()
  if new then
    counter = counter + 1
    return press(prefix .. counter)
  end
  if sequential then
    counter = counter % pool + 1
    return requests[counter]
  end
  return requests[math.random(pool)]
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "RESULT requests=%d rps=%.0f p50_ms=%.3f p99_ms=%.3f p999_ms=%.3f errors=%d\n",
    summary.requests, summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    latency:percentile(99.9) / 1000,
    e.connect + e.read + e.write + e.status + e.timeout))
end
