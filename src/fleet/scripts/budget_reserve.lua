-- BUDGET_RESERVE: holds one request's max_price from a pay-per-crawl budget's day, for
-- the whole fleet, when what is left covers it. Reservations of an instance that died
-- before settling lapse at their expiry (the longest an exchange can run), and return
-- to the day here.
--
-- KEYS: 1 the day's tally (hash: spent, reserved), 2 its held reservations (sorted
--       set of "ticket amount" by expiry, ms)
-- ARGV: 1 ticket, 2 amount, 3 daily budget, 4 hold ms, 5 keep ms
-- Returns 1 when held, 0 when the day's budget does not cover it.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)) do
  local lapsed = tonumber(string.match(member, ' (%d+)$')) or 0
  redis.call('HINCRBY', KEYS[1], 'reserved', -lapsed)
  redis.call('ZREM', KEYS[2], member)
end
local spent = tonumber(redis.call('HGET', KEYS[1], 'spent') or '0')
local reserved = tonumber(redis.call('HGET', KEYS[1], 'reserved') or '0')
local amount, daily = tonumber(ARGV[2]), tonumber(ARGV[3])
if daily - spent - reserved < amount then
  return 0
end
redis.call('HINCRBY', KEYS[1], 'reserved', amount)
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[4]), ARGV[1] .. ' ' .. ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
return 1
