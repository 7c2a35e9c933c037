-- MEMBER_RENEW: renews this instance's membership lease, registering it (a new epoch)
-- when it has no live record: the first time, after its record lapsed (a stalled
-- process, a partition), or after Redis lost it.
--
-- It also keeps the data set's generation: a new one when the data set has none, or
-- is served by another Redis server than the one that made it (a restart, a failover).
-- Writes acknowledged before may be lost, so a fence is set: before it, a claim written
-- before the generation, or of a key nobody holds, is not acted on (own_claim.lua),
-- but by the owner that vouches it acted for the key without a break. Its length:
-- * another server: until every member's lease and exchanges as recorded must be over;
-- * no generation, found by a member that saw another: its own lease and `after`
--   (the old owners' records are lost; members share their timings);
-- * no generation, found by a member that never saw one: a settle window, or with
--   `fleet.new_data_set: fence` the full fence. A member that saw another generation
--   and may still have exchanges running (ARGV 9) extends the fence when it renews.
--
-- KEYS: 1 members, 2 epoch counter, 3 generation, 4 the server that made it, 5 fence.
-- ARGV: 1 member id, 2 epoch held (0: none), 3 lease ms, 4 peer address, 5 a new
-- generation to set when one is due, 6 state (up | leaving), 7 after ms, 8 the
-- generation this member saw last ('' none), 9 how long its exchanges may still run
-- (ms, by its own clock), 10 the settle window ms, 11 new_data_set (settle | fence),
-- 12 a forward step of Redis' clock this member saw (ms, 0: none; absent from older
-- members): every member may then look lapsed while it still acts, so the fence is
-- extended as for another server.
-- Returns Redis' time, this instance's epoch, the generation, the fence (ms, 0: none),
-- then every member: id, record. A member that would register with the peer address a
-- live member of another name announces is not: {'peer_taken', that member's id}
-- (an earlier run of the same member, its name before '/', may still hold it).
local now = now_ms()
local epoch = tonumber(ARGV[2])
local held = member(KEYS[1], ARGV[1])
local joining = epoch == 0 or not (live(held, now) and held.epoch == epoch)
if joining then
  local name = string.match(ARGV[1], '^[^/]*')
  local all, taken = redis.call('HGETALL', KEYS[1]), nil
  for i = 1, #all, 2 do
    local other = member(KEYS[1], all[i])
    if live(other, now) and other.peer == ARGV[4] and string.match(all[i], '^[^/]*') ~= name
        and (taken == nil or all[i] < taken) then
      taken = all[i]
    end
  end
  -- The first by id: the answer does not depend on the hash's order.
  if taken then return {'peer_taken', taken} end
end
local lease, after = tonumber(ARGV[3]), tonumber(ARGV[7])
local run = string.match(redis.call('INFO', 'server'), 'run_id:(%w+)') or ''
local gen = redis.call('GET', KEYS[3])
local fence = tonumber(redis.call('GET', KEYS[5]) or '0')
-- The longest any member recorded may still act and have exchanges running.
local function every_span(span)
  local all = redis.call('HVALS', KEYS[1])
  for i = 1, #all do
    local l, a = string.match(all[i], '|(%d+)|(%d+)$')
    if l then span = math.max(span, tonumber(l) + tonumber(a)) end
  end
  return span
end
if tonumber(ARGV[12] or '0') > 0 then
  fence = math.max(fence, now + every_span(lease + after))
end
if (not gen) or redis.call('GET', KEYS[4]) ~= run then
  local span = lease + after
  if gen then
    -- Another server: every member recorded may still act and have exchanges running
    -- (a record's expiry may be one a lost renewal had extended).
    span = every_span(span)
  elseif ARGV[8] == '' and ARGV[11] ~= 'fence' then
    span = tonumber(ARGV[10])
  end
  gen = ARGV[5]
  redis.call('SET', KEYS[3], gen)
  redis.call('SET', KEYS[4], run)
  fence = math.max(fence, now + span)
elseif ARGV[8] ~= '' and ARGV[8] ~= gen then
  -- A member that saw an earlier generation, and may still have exchanges running.
  fence = math.max(fence, now + tonumber(ARGV[9]))
end
redis.call('SET', KEYS[5], fence)
if joining then
  epoch = redis.call('INCR', KEYS[2])
end
redis.call('HSET', KEYS[1], ARGV[1], table.concat(
  {epoch, now + lease, ARGV[6], ARGV[4], lease, after}, '|'))
local out = {now, epoch, gen, fence}
-- Members lapsed for a day are forgotten.
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local exp = tonumber(string.match(all[i + 1], '^%d+|(%d+)|'))
  if exp and exp < now - 86400000 then
    redis.call('HDEL', KEYS[1], all[i])
  else
    out[#out + 1] = all[i]
    out[#out + 1] = all[i + 1]
  end
end
return out
