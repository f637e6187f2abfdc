-- KEYS[1]: the lock. Returns {fence, pttl} of the holder, or nil when free.
local current = redis.call('GET', KEYS[1])
if not current then
  return false
end
return {string.sub(current, 34), tostring(redis.call('PTTL', KEYS[1]))}
