-- Leaves a key's queue of fair waiters. KEYS[1] to KEYS[3]: the queue, the places and
-- the TTLs; KEYS[4]: the lock; KEYS[5]: the fence counter. ARGV as release.lua's.
-- A lock this owner holds is one a release handed it (or one its own step granted
-- with the reply lost): the waiter gave up, so it is released as release.lua does. A
-- waiter that was at the head wakes the others, since the next one may now be first.
-- Returns 1 when the owner was queued or held the lock.
local current = redis.call('GET', KEYS[4])
if current and string.sub(current, 1, 33) == ARGV[1] .. ':' then
  free_and_hand_over(KEYS[4], KEYS[1], KEYS[2], KEYS[3], KEYS[5], current, ARGV[2], ARGV[3], ARGV[4])
  return 1
end
local head = redis.call('ZRANGE', KEYS[1], 0, 0)[1]
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
if removed == 1 and head == ARGV[1] then
  redis.call('PUBLISH', ARGV[2], '')
end
return removed
