-- Compare-and-delete with one key name: the release of a backend that has not waited
-- in fair mode (backend.rs, `release_telling`). KEYS[1]: the lock,
-- "<prefix>{<key>}". ARGV[1]: the owner token; ARGV[2]: the prefix's length in bytes,
-- or '' to tell no one (release.lua says when). The release channel,
-- "<prefix>released:{<key>}", is made from the lock's name only where it publishes:
-- a channel is not a key, and sending its name on every release would cost the
-- request about a quarter more bytes.
-- A grant fair waiters queued for ends in '!!' (queue.lua): its release must hand the
-- lock over, which needs the queue's key names, so it is left held here and the
-- answer is 2, for release.lua to run. Otherwise the lease is deleted and, where
-- someone waited ('!'), every waiter is woken. Returns 1 when released, 0 when this
-- owner did not hold the key, 2 as above.
-- The owner is compared in place (its 32 digits, then the ':'), making no string.
local current = redis.call('GET', KEYS[1])
if not (current and string.find(current, ARGV[1], 1, true) == 1
    and string.byte(current, 33) == 58) then
  return 0
end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[1])
  return 1
end
local last = string.byte(current, -1)
if last == 33 and string.byte(current, -2) == 33 then
  return 2
end
redis.call('DEL', KEYS[1])
if last == 33 then
  local n = tonumber(ARGV[2])
  redis.call('PUBLISH', string.sub(KEYS[1], 1, n) .. 'released:' .. string.sub(KEYS[1], n + 1), '')
end
return 1
