-- BUDGET_READ: a pay-per-crawl budget's day so far, for the status page.
-- KEYS: 1 the day's tally. Returns {spent, reserved}.
local h = redis.call('HMGET', KEYS[1], 'spent', 'reserved')
return {tonumber(h[1] or '0'), tonumber(h[2] or '0')}
