-- OWN_RELEASE: hands a pacing key over (a graceful leave, an idle origin forgotten, or
-- an origin whose traffic comes from another member): what the next owner must start
-- from stays, when it was released and per robots.txt group "last_end|paused_until|
-- backoff" (ms). Without an heir the claim is left to whoever meets the key next; with
-- one, it names the heir (marked released): every member routes to it, and it takes
-- the key, and the facts, with the next request it routes. Only the holder, in its
-- epoch and the current generation (on the server that made it), releases.
-- KEYS: 1 the claim, 2 generation, 3 the generation's server.
-- ARGV: 1 member id, 2 epoch, 3 generation, 4 keep ms, 5 heir ('' none), 6 heir epoch,
-- 7 the taking's number, then group, facts pairs. Returns 1 when released.
local c = read_claim(KEYS[1])
if redis.call('GET', KEYS[2]) ~= ARGV[3] or not same_server(KEYS[3]) or c.m ~= ARGV[1]
    or c.e ~= tonumber(ARGV[2]) or c.gen ~= ARGV[3] or c.n ~= ARGV[7] then
  return 0
end
if ARGV[5] == '' then
  redis.call('HDEL', KEYS[1], 'm', 'e')
else
  redis.call('HSET', KEYS[1], 'm', ARGV[5], 'e', ARGV[6])
end
redis.call('HSET', KEYS[1], 'released', now_ms())
for i = 8, #ARGV, 2 do
  redis.call('HSET', KEYS[1], 'f:' .. ARGV[i], ARGV[i + 1])
end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[4]))
return 1
