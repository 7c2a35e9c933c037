-- Renews this instance's membership lease, registering it (a new epoch) when it has no
-- live record: the first time, after its record lapsed (a stalled process, a partition),
-- or after Redis lost it. Returns Redis' time, this instance's epoch, the data set's boot
-- id (made when missing: a new one means Redis lost everything), and every member.
-- KEYS: members hash, epoch counter, boot id ({robotsgate} slot).
-- ARGV: member id, epoch held (0: none), lease ms, peer address, a boot id to set when
-- there is none, state (up | leaving).
-- A member's value: "epoch|expires_ms|state|peer address".
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local boot = redis.call('GET', KEYS[3])
if not boot then
  boot = ARGV[5]
  redis.call('SET', KEYS[3], boot)
end
local epoch = tonumber(ARGV[2])
local held = redis.call('HGET', KEYS[1], ARGV[1])
local live = false
if held then
  local e, expires = string.match(held, '^(%d+)|(%d+)|')
  live = tonumber(e) == epoch and tonumber(expires) > now
end
if epoch == 0 or not live then
  epoch = redis.call('INCR', KEYS[2])
end
local expires = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], epoch .. '|' .. expires .. '|' .. ARGV[6] .. '|' .. ARGV[4])
-- Members lapsed for a day are forgotten.
local all = redis.call('HGETALL', KEYS[1])
local out = {now, epoch, boot}
for i = 1, #all, 2 do
  local e, exp = string.match(all[i + 1], '^(%d+)|(%d+)|')
  if exp and tonumber(exp) < now - 86400000 then
    redis.call('HDEL', KEYS[1], all[i])
  else
    out[#out + 1] = all[i]
    out[#out + 1] = all[i + 1]
  end
end
return out
