-- VIEW: a shared schedule as the admin API shows it.
-- KEYS: 1 schedule, 2 in-flight holders, 3 queue
-- Returns {the group turn's holder or false, in-flight turns held, tickets queued}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local h = redis.call('HMGET', KEYS[1], 'holder', 'lease')
local holder = false
if h[1] and (tonumber(h[2]) or 0) > now then holder = h[1] end
return {holder, redis.call('ZCOUNT', KEYS[2], now, '+inf'), redis.call('ZCARD', KEYS[3])}
