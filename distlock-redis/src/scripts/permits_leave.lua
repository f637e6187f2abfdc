-- Takes a waiter's place away. KEYS[1]: the places; KEYS[2]: the name's hash.
-- ARGV[1]: the owner token; ARGV[2]: the name's channel (the waiters it held back
-- look again).
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  redis.call('HDEL', KEYS[2], 'p:' .. ARGV[1])
  redis.call('PUBLISH', ARGV[2], '')
end
return 0
