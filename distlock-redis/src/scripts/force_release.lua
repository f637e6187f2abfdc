-- KEYS[1]: the lock. ARGV[1]: the release channel. Deletes whoever holds it.
local deleted = redis.call('DEL', KEYS[1])
if deleted == 1 then
  redis.call('PUBLISH', ARGV[1], '')
end
return deleted
