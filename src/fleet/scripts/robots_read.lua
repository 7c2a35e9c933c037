-- ROBOTS_READ: an origin's shared robots.txt, its times relative to now. A read is a
-- use: the record then lives at least `keep` more.
-- KEYS: 1 robots record. ARGV: 1 keep ms.
-- Returns the fields (version, kind, body, why, fresh, fetched, since, retry,
-- failures, outcome, cause), or nil when none is stored.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local h = redis.call('HMGET', KEYS[1], 'v', 'kind', 'body', 'why', 'fresh', 'fetched', 'since', 'retry', 'failures', 'outcome', 'cause')
if not h[1] then return false end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[1]) then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
local function rel(v)
  if not v or v == '' then return '' end
  return tostring(tonumber(v) - now)
end
return {h[1], h[2] or '', h[3] or '', h[4] or '', rel(h[5]), rel(h[6]), rel(h[7]), rel(h[8]), h[9] or '0', h[10] or '', h[11] or ''}
