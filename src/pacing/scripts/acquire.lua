-- ACQUIRE: one request's turns on an origin's shared schedule, in one call: the
-- group's turn when a delay or pause is in force, and an in-flight turn.
--
-- KEYS: 1 schedule (hash), 2 in-flight holders (zset: ticket -> lease end),
--       3 queue (zset: ticket -> arrival), 4 queue expiry (zset: ticket -> expiry),
--       5 robots.txt record (hash; its `end` is the last fetch's end)
-- ARGV: 1 ticket (`<instance>:<n>`), 2 fence: Redis time (ms) past which this call
--       must not take effect (its caller has given up on it), 3 delay ms (-1: the
--       schedule's own), 4 in-flight capacity (0: no limit), 5 lease ms, 6 max queue,
--       7 max wait ms, 8 ticket grace ms, 9 keep ms, 10 the ticket's own deadline
--       (Redis ms), 11 wake channel prefix, 12-14 what the caller knows and Redis may
--       have lost (a restart, a failover, an eviction): ms since its last end on this
--       schedule (-1: none), pause left ms, backoff ms
-- Returns {state, wait ms, now, pause left ms, backoff ms, slow-down ms, holds the
-- group's turn (1/0)}; state is
-- `go`, `wait` (wait ms: until due; -1: until woken), `full`, `long` (wait ms: the
-- estimate) or `late` (fenced: nothing changed).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now > tonumber(ARGV[2]) then return {'late', 0, now, 0, 0, 0, 0} end

local S, F, Q, X, R = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local ticket = ARGV[1]
local capacity = tonumber(ARGV[4])
local lease = tonumber(ARGV[5])
local grace = tonumber(ARGV[8])
local keep = tonumber(ARGV[9])

local h = redis.call('HMGET', S, 'end', 'pause', 'backoff', 'slow', 'delay', 'holder', 'lease')
local found = h[1] ~= false
local last_end = tonumber(h[1]) or 0
local pause = tonumber(h[2]) or 0
local backoff = tonumber(h[3]) or 0
local slow = tonumber(h[4]) or 0
local delay = tonumber(ARGV[3])
if delay < 0 then delay = tonumber(h[5]) or 0 end
local holder = h[6]

-- What the caller knows is never forgotten here: a record lost with a Redis restart,
-- a failover or an eviction (or older than the caller's last end) is brought up to it.
local known_end = tonumber(ARGV[12])
if known_end >= 0 then last_end = math.max(last_end, now - known_end) end
pause = math.max(pause, now + tonumber(ARGV[13]))
backoff = math.max(backoff, tonumber(ARGV[14]))

-- A holder whose lease ran out (its instance died): its turn ended then.
if holder and (tonumber(h[7]) or 0) <= now then
  last_end = math.max(last_end, tonumber(h[7]) or 0)
  holder = false
  redis.call('HDEL', S, 'holder', 'lease')
end

local effective = math.max(delay, backoff, slow)
local gated = effective > 0 or pause > now or holder ~= false
local due = pause
if gated then
  -- The robots.txt fetch counts as the schedule's previous request.
  last_end = math.max(last_end, tonumber(redis.call('HGET', R, 'end')) or 0)
  -- No record at all while a delay is in force: a new schedule or a lost one. The
  -- delay then runs from now, as if a request had just ended.
  if not found and known_end < 0 then
    last_end = now
    redis.call('HSET', S, 'end', now)
  end
  due = math.max(last_end + effective, pause)
end

local holding = 0
if capacity > 0 then
  redis.call('ZREMRANGEBYSCORE', F, '-inf', now)
  holding = redis.call('ZCARD', F)
end

-- The head of the queue, dropping heads whose ticket expired (their instance died or
-- gave up without saying so).
local function live_head()
  for _ = 1, 8 do
    local head = redis.call('ZRANGE', Q, 0, 0)[1]
    if not head then return nil end
    if (tonumber(redis.call('ZSCORE', X, head)) or 0) > now then return head end
    redis.call('ZREM', Q, head)
    redis.call('ZREM', X, head)
  end
  return redis.call('ZRANGE', Q, 0, 0)[1]
end

local function reply(state, wait)
  local group_turn = 0
  if state == 'go' and gated then group_turn = 1 end
  return {state, wait, now, math.max(pause - now, 0), backoff, slow, group_turn}
end

local head = live_head()
local first = head == nil or head == ticket
local free = (capacity == 0 or holding < capacity) and (not holder) and now >= due
if first and free then
  if head then
    redis.call('ZREM', Q, ticket)
    redis.call('ZREM', X, ticket)
  end
  if capacity > 0 then
    redis.call('ZADD', F, now + lease, ticket)
    redis.call('PEXPIRE', F, lease + keep)
  end
  if gated then
    redis.call('HSET', S, 'end', last_end, 'pause', pause, 'backoff', backoff, 'delay', delay,
      'holder', ticket, 'lease', now + lease)
    redis.call('PEXPIRE', S, keep + lease + math.max(pause - now, 0))
  elseif head and capacity > 0 and holding + 1 < capacity then
    -- Another in-flight turn is still free: the next in line may take it at once.
    local next = live_head()
    if next then
      redis.call('PUBLISH', ARGV[11] .. string.match(next, '^(.*):'), 'w\n' .. next .. '\n0')
    end
  end
  return reply('go', 0)
end

-- The turn is free but another ticket heads the queue: a live head asks within POLL
-- (less than the grace), so one that has not claimed it by then is dead (its instance
-- was killed while it waited, and no release will ever wake it).
if not first and free then
  if (tonumber(redis.call('ZSCORE', X, head)) or 0) > now + grace then
    redis.call('ZADD', X, now + grace, head)
  end
end

local queued = head == ticket or redis.call('ZSCORE', Q, ticket)
if not queued then
  local ahead = redis.call('ZCARD', Q)
  local rounds = ahead
  if holder then rounds = rounds + 1 end
  if not gated then rounds = math.floor((ahead + holding) / math.max(capacity, 1)) end
  local estimate = math.max(due - now, 0) + effective * rounds
  if ahead >= tonumber(ARGV[6]) then return reply('full', estimate) end
  if estimate > tonumber(ARGV[7]) then return reply('long', estimate) end
  redis.call('ZADD', Q, redis.call('HINCRBY', S, 'seq', 1), ticket)
  redis.call('PEXPIRE', S, keep + math.max(pause - now, 0))
  redis.call('PEXPIRE', Q, keep)
  redis.call('PEXPIRE', X, keep)
  -- Behind others: kept until its own deadline; the release that makes it the head
  -- shortens that to its due time plus the grace.
  redis.call('ZADD', X, tonumber(ARGV[10]) + grace, ticket)
end
if not first then return reply('wait', -1) end
-- The head: due at `due` unless a turn is held (then woken by its release).
if holder or (capacity > 0 and holding >= capacity) then
  redis.call('ZADD', X, math.max(tonumber(redis.call('ZSCORE', X, ticket)) or 0, now + lease + grace), ticket)
  return reply('wait', -1)
end
redis.call('ZADD', X, due + grace, ticket)
return reply('wait', due - now)
