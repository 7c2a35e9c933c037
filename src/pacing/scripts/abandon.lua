-- ABANDON: a ticket leaves without going upstream (refused, its client gone, or its
-- ACQUIRE's answer lost to a timeout). Whatever the ticket holds or waits for is
-- given back; a turn it may have been granted unknowingly ends now (the next delay
-- runs from now: early is never possible). Wakes the next in line when it was first.
--
-- KEYS: 1 schedule, 2 in-flight holders, 3 queue, 4 queue expiry
-- ARGV: 1 ticket, 2 wake channel prefix, 3 keep ms
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local S, F, Q, X = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local ticket = ARGV[1]
local first = redis.call('ZRANGE', Q, 0, 0)[1] == ticket
redis.call('ZREM', Q, ticket)
redis.call('ZREM', X, ticket)
local held = redis.call('ZREM', F, ticket) == 1
if redis.call('HGET', S, 'holder') == ticket then
  redis.call('HDEL', S, 'holder', 'lease')
  redis.call('HSET', S, 'end', math.max(tonumber(redis.call('HGET', S, 'end')) or 0, now))
  redis.call('PEXPIRE', S, tonumber(ARGV[3]))
  held = true
end
if first or held then
  local head = redis.call('ZRANGE', Q, 0, 0)[1]
  if head then
    redis.call('PUBLISH', ARGV[2] .. string.match(head, '^(.*):'), 'w\n' .. head .. '\n0')
  end
end
return 1
