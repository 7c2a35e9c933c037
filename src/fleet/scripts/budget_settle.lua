-- BUDGET_SETTLE: a paying request's answer came (or its exchange ended without one):
-- its reservation returns to the day, unless it lapsed already, and what the origin
-- charged is counted as spent.
--
-- KEYS: 1 the day's tally, 2 its held reservations (see budget_reserve.lua)
-- ARGV: 1 ticket, 2 amount held, 3 charged, 4 keep ms
if redis.call('ZREM', KEYS[2], ARGV[1] .. ' ' .. ARGV[2]) == 1 then
  redis.call('HINCRBY', KEYS[1], 'reserved', -tonumber(ARGV[2]))
end
if tonumber(ARGV[3]) > 0 then
  redis.call('HINCRBY', KEYS[1], 'spent', ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end
return 1
