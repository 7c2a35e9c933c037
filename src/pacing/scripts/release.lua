-- RELEASE: a request's exchange with the origin has ended. Records the end (the next
-- delay runs from it), applies the origin's answer (a Retry-After pause, the backoff,
-- the adaptive slow-down), frees its turns and wakes the next in line: only the
-- instance whose ticket that is, on its own channel.
--
-- KEYS: 1 schedule, 2 in-flight holders, 3 queue, 4 queue expiry
-- ARGV: 1 ticket ('-': a request that held no turn, reporting its answer), 2 status
--       (0: none), 3 Retry-After ms (-1: none), 4 ceiling ms, 5 keep ms, 6 fleet channel,
--       7 group, 8 origin, 9 ticket grace ms, 10 slow-down ms (-1: unchanged),
--       11 wake channel prefix
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local S, F, Q, X = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local ticket = ARGV[1]
local status = tonumber(ARGV[2])
local retry = tonumber(ARGV[3])
local ceiling = tonumber(ARGV[4])
redis.call('ZREM', F, ticket)
local h = redis.call('HMGET', S, 'end', 'pause', 'backoff', 'slow', 'delay', 'holder')
local pause = tonumber(h[2]) or 0
local backoff = tonumber(h[3]) or 0
local slow = tonumber(h[4]) or 0
local delay = tonumber(h[5]) or 0
local old_pause, old_backoff, old_slow = pause, backoff, slow
if status == 429 or status == 503 then
  if retry >= 0 then
    pause = math.max(pause, now + math.min(retry, ceiling))
  else
    backoff = math.min(math.max(backoff * 2, math.max(delay, 1000)), ceiling)
  end
elseif status >= 500 then
  backoff = math.min(math.max(backoff * 2, math.max(delay, 1000)), ceiling)
elseif status > 0 then
  backoff = math.floor(backoff / 2)
end
if tonumber(ARGV[10]) >= 0 then slow = math.min(tonumber(ARGV[10]), ceiling) end

-- A schedule with nothing in force keeps no record (most origins): only one that has
-- one, or gains a limit now, is written.
local changed = pause ~= old_pause or backoff ~= old_backoff or slow ~= old_slow
if h[1] or changed then
  redis.call('HSET', S, 'end', math.max(tonumber(h[1]) or 0, now), 'pause', pause,
    'backoff', backoff, 'slow', slow)
  if h[6] == ticket then redis.call('HDEL', S, 'holder', 'lease') end
  redis.call('PEXPIRE', S, tonumber(ARGV[5]) + math.max(pause - now, 0))
end

-- Wake the next in line (dropping heads whose ticket expired): due one delay from now.
for _ = 1, 8 do
  local head = redis.call('ZRANGE', Q, 0, 0)[1]
  if not head then break end
  if (tonumber(redis.call('ZSCORE', X, head)) or 0) > now then
    local due = math.max(now + math.max(delay, backoff, slow), pause)
    redis.call('ZADD', X, due + tonumber(ARGV[9]), head)
    redis.call('PUBLISH', ARGV[11] .. string.match(head, '^(.*):'), 'w\n' .. head .. '\n' .. (due - now))
    break
  end
  redis.call('ZREM', Q, head)
  redis.call('ZREM', X, head)
end
-- A new pause or backoff reaches every instance at once (rare: an origin's 429/5xx).
if pause ~= old_pause or backoff ~= old_backoff then
  redis.call('PUBLISH', ARGV[6], 'l\n' .. math.max(pause - now, 0) .. '\n' .. backoff .. '\n' .. ARGV[7] .. '\n' .. ARGV[8])
end
return 1
