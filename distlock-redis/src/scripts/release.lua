-- Compare-and-delete. KEYS[1]: the lock; KEYS[2] to KEYS[4]: the key's queue of fair
-- waiters, their places and their TTLs (queue.lua); KEYS[5]: the fence counter.
-- ARGV[1]: the owner token; ARGV[2]: the release channel, or '' to tell no one (a
-- Redlock attempt that won only a minority takes back its grants quietly: waking
-- every waiter of the key for a lock that was never held would start them all at
-- once again, and split them again); ARGV[3]: '1' to hand the lock to the head of
-- its queue; ARGV[4]: the counter's grace, in ms. What the waiters are told, and the
-- handoff: handoff.lua. Returns 1 when released, 0 when this owner did not hold the
-- key.
local current = redis.call('GET', KEYS[1])
if current and string.sub(current, 1, 33) == ARGV[1] .. ':' then
  free_and_hand_over(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], current, ARGV[2], ARGV[3], ARGV[4])
  return 1
end
return 0
