-- Hands a pacing key over (a graceful leave, or an idle origin forgotten): its claim
-- goes, and what the next owner must start from stays: when it was released, and per
-- robots.txt group "last_end|paused_until|backoff" (Redis ms). Only the holder releases.
-- KEYS: the claim hash. ARGV: member id, epoch, keep ms, then group, state pairs.
local m = redis.call('HGET', KEYS[1], 'm')
local e = redis.call('HGET', KEYS[1], 'e')
if m ~= ARGV[1] or e ~= ARGV[2] then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HDEL', KEYS[1], 'm', 'e')
redis.call('HSET', KEYS[1], 'released', tostring(now))
for i = 4, #ARGV, 2 do
  redis.call('HSET', KEYS[1], 'g:' .. ARGV[i], ARGV[i + 1])
end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
return 1
