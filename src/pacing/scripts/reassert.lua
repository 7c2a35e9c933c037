-- REASSERT: on the backend's return, an instance writes again a turn it still holds
-- (Redis may have lost it: restarted empty, a replica promoted without the last
-- writes). The lease runs to the same end as when it was granted.
--
-- KEYS: 1 schedule, 2 in-flight holders
-- ARGV: 1 ticket, 2 lease left ms, 3 holds the group's turn (1/0), 4 holds an
--       in-flight turn (1/0), 5 keep ms
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local S, F = KEYS[1], KEYS[2]
local ticket = ARGV[1]
local until_ms = now + tonumber(ARGV[2])
if ARGV[4] == '1' then
  redis.call('ZADD', F, until_ms, ticket)
  redis.call('PEXPIRE', F, tonumber(ARGV[2]) + tonumber(ARGV[5]))
end
if ARGV[3] == '1' then
  local h = redis.call('HMGET', S, 'holder', 'lease', 'end')
  if not h[1] or h[1] == ticket or (tonumber(h[2]) or 0) <= now then
    redis.call('HSET', S, 'holder', ticket, 'lease', until_ms, 'end', tonumber(h[3]) or now)
    redis.call('PEXPIRE', S, tonumber(ARGV[2]) + tonumber(ARGV[5]))
  end
end
return 1
