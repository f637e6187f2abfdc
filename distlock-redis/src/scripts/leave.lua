-- Leaves a key's queue of fair waiters. KEYS[1]: the queue; KEYS[2]: the places.
-- ARGV[1]: the owner token; ARGV[2]: the release channel. A waiter that was at the
-- head wakes the others, since the next one may now be first. Returns 1 when the
-- owner was queued.
local head = redis.call('ZRANGE', KEYS[1], 0, 0)[1]
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if removed == 1 and head == ARGV[1] then
  redis.call('PUBLISH', ARGV[2], '')
end
return removed
