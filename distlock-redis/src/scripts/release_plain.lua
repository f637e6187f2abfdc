-- Compare-and-delete with one key name: the release of a backend that has not waited
-- in fair mode (backend.rs, `release_telling`). KEYS[1]: the lock. ARGV[1]: the owner
-- token; ARGV[2]: the release channel, or '' to tell no one (release.lua says when).
-- A grant fair waiters queued for ends in '!!' (queue.lua): its release must hand the
-- lock over, which needs the queue's key names, so it is left held here and the
-- answer is 2, for release.lua to run. Otherwise the lease is deleted and, where
-- someone waited ('!'), every waiter is woken. Returns 1 when released, 0 when this
-- owner did not hold the key, 2 as above.
local current = redis.call('GET', KEYS[1])
if not (current and string.sub(current, 1, 33) == ARGV[1] .. ':') then
  return 0
end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[1])
  return 1
end
if string.sub(current, -2) == '!!' then
  return 2
end
redis.call('DEL', KEYS[1])
if string.sub(current, -1) == '!' then
  redis.call('PUBLISH', ARGV[2], '')
end
return 1
