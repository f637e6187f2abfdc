-- Compare-and-delete. KEYS[1]: the lock. ARGV[1]: the owner token; ARGV[2]: the
-- release channel, or '' to tell no one (a Redlock attempt that won only a minority
-- takes back its grants quietly: waking every waiter of the key for a lock that was
-- never held would start them all at once again, and split them again). The release
-- is published only when someone waited for this grant (acquire.lua marked it with
-- a trailing '!'): a release nobody waits for costs no PUBLISH. Returns 1 when
-- released, 0 when this owner did not hold the key.
local current = redis.call('GET', KEYS[1])
if current and string.sub(current, 1, 33) == ARGV[1] .. ':' then
  redis.call('DEL', KEYS[1])
  if ARGV[2] ~= '' and string.sub(current, -1) == '!' then
    redis.call('PUBLISH', ARGV[2], '')
  end
  return 1
end
return 0
