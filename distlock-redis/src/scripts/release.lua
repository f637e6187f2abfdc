-- Compare-and-delete. KEYS[1]: the lock; KEYS[2], KEYS[3]: the key's queue of fair
-- waiters and their places (queue.lua). ARGV[1]: the owner token; ARGV[2]: the
-- release channel, or '' to tell no one (a Redlock attempt that won only a minority
-- takes back its grants quietly: waking every waiter of the key for a lock that was
-- never held would start them all at once again, and split them again). The release
-- is published only when someone waited for this grant (acquire.lua and queue.lua
-- marked it with a trailing '!'): a release nobody waits for costs no PUBLISH. When
-- the key has fair waiters, the message names the first whose place is live, the
-- one the next fair step grants, so that only it is woken; otherwise it is empty,
-- and every waiter is. Returns 1 when released, 0 when this owner did not hold the
-- key.
local current = redis.call('GET', KEYS[1])
if current and string.sub(current, 1, 33) == ARGV[1] .. ':' then
  redis.call('DEL', KEYS[1])
  if ARGV[2] ~= '' and string.sub(current, -1) == '!' then
    local head = ''
    local queued = redis.call('ZRANGE', KEYS[2], 0, 3)
    if queued[1] then
      local clock = redis.call('TIME')
      local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
      for _, waiter in ipairs(queued) do
        local place = redis.call('ZSCORE', KEYS[3], waiter)
        if place and tonumber(place) > now_ms then
          head = waiter
          break
        end
      end
    end
    redis.call('PUBLISH', ARGV[2], head)
  end
  return 1
end
return 0
