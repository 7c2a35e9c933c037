-- PRELUDE: what the membership and ownership scripts share; the loader puts it before
-- each of them (scripts.rs). Every key they touch is in the {robotsgate} hash slot, so
-- each script decides from the whole truth at once, on a Redis Cluster too.
--
-- A member's record (hash {robotsgate}:members, by id):
--   "epoch|expires_ms|state|peer|lease_ms|after_ms"
-- state is up, leaving, or left (member_leave.lua: kept until its lease ends, a member
-- no more); after_ms is how long after its lease ends its exchanges may
-- still run (its outage grace plus the longest an exchange holds a turn).
-- A claim (hash {robotsgate}:own:<pacing key>): m (member), e (its epoch), gen (the
-- generation it was written in), n (a number new each time the claim is taken: what
-- its holder releases and records by, so that a call held up on its way cannot touch a
-- later taking), nb (ms: nothing may act for the key before), pv (taken while a fence
-- held: to be confirmed again once its wait is over), released (ms: its last
-- owner let it go, handing over its facts), f:<group> (a robots.txt group's facts,
-- "last_end|paused_until|backoff" in ms).

-- Is the data set still served by the server that made its generation (key `server`
-- holds that server's run id)? After a restart or a failover it is not, until a renewal
-- makes a new generation (member_renew.lua): nothing is decided on it before.
local function same_server(server)
  local run = string.match(redis.call('INFO', 'server'), 'run_id:(%w+)') or ''
  return redis.call('GET', server) == run
end

-- Redis' clock, in milliseconds.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The record of member `id` in the members hash `members`, or nil.
local function member(members, id)
  local v = redis.call('HGET', members, id)
  if not v then return nil end
  local e, x, s, p, l, a = string.match(v, '^(%d+)|(%d+)|(%a+)|([^|]*)|(%d+)|(%d+)$')
  if not e then return nil end
  return {epoch = tonumber(e), expires = tonumber(x), state = s, peer = p,
          lease = tonumber(l), after = tonumber(a)}
end

-- Is `m` (a record or nil) a live member at `now`: its lease not over, and not left
-- (a left member's record bounds only how long its unreleased claims wait)?
local function live(m, now)
  return m ~= nil and m.expires > now and m.state ~= 'left'
end

-- The claim hash `key`: its owner fields, and its facts as a flat list.
local function read_claim(key)
  local all = redis.call('HGETALL', key)
  local c = {facts = {}, nb = 0}
  for i = 1, #all, 2 do
    local k, v = all[i], all[i + 1]
    if k == 'm' then c.m = v
    elseif k == 'e' then c.e = tonumber(v)
    elseif k == 'gen' then c.gen = v
    elseif k == 'n' then c.n = v
    elseif k == 'pv' then c.pv = true
    elseif k == 'nb' then c.nb = tonumber(v) or 0
    elseif k == 'released' then c.released = v
    elseif string.sub(k, 1, 2) == 'f:' then
      c.facts[#c.facts + 1] = string.sub(k, 3)
      c.facts[#c.facts + 1] = v
    end
  end
  return c
end
