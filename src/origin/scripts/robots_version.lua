-- ROBOTS_VERSION: the version of an origin's shared robots.txt, or nil.
-- KEYS: 1 robots record.
return redis.call('HGET', KEYS[1], 'v')
