-- Writes a durable fact of an owned pacing key when it happens (an origin's pause or
-- backoff), so that a new owner starts from it. Only the holder writes.
-- KEYS: the claim hash. ARGV: member id, epoch, group, "last_end|paused_until|backoff".
if redis.call('HGET', KEYS[1], 'm') ~= ARGV[1] or redis.call('HGET', KEYS[1], 'e') ~= ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[1], 'g:' .. ARGV[3], ARGV[4])
return 1
