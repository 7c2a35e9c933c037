-- ROBOTS_PURGE: forgets an origin's shared robots.txt, everywhere.
-- KEYS: 1 robots record. ARGV: 1 channel, 2 origin.
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[1], 'p\n' .. ARGV[2])
return 1
