-- KEYS[1]: the lock. Returns {fence, pttl, owner, rest} of the holder, or nil when
-- free; `rest` is the value from the fence on ("<fence>/<ms>/<holder>/" and marks).
-- The owner token stays inside the backend (a Redlock groups its masters' holders by
-- it); no caller is shown it.
local current = redis.call('GET', KEYS[1])
if not current then
  return false
end
return {string.match(current, '%d+', 34), tostring(redis.call('PTTL', KEYS[1])), string.sub(current, 1, 32), string.sub(current, 34)}
