-- OWN_RECORD: writes a durable fact of an owned pacing key when it happens (an
-- origin's pause or backoff), so that a new owner starts from it. Only the holder, in
-- its epoch and taking, writes.
-- KEYS: 1 the claim. ARGV: 1 member id, 2 epoch, 3 the taking's number, 4 group,
-- 5 "last_end|paused_until|backoff".
if redis.call('HGET', KEYS[1], 'm') ~= ARGV[1]
    or redis.call('HGET', KEYS[1], 'e') ~= ARGV[2]
    or redis.call('HGET', KEYS[1], 'n') ~= ARGV[3] then
  return 0
end
redis.call('HSET', KEYS[1], 'f:' .. ARGV[4], ARGV[5])
return 1
