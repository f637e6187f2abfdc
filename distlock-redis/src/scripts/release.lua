-- Compare-and-delete. KEYS[1]: the lock. ARGV[1]: the owner token; ARGV[2]: the
-- release channel. Returns 1 when released, 0 when this owner did not hold the key.
local current = redis.call('GET', KEYS[1])
if current and string.sub(current, 1, 33) == ARGV[1] .. ':' then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], '')
  return 1
end
return 0
