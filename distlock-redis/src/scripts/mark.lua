-- Marks a grant as waited for: the step an efficiency lock's waiter takes after its
-- `SET NX PX GET` found the key held (backend.rs, `grant_unfenced`), which acquire.lua
-- takes in its own step. KEYS[1]: the lock; ARGV[1]: its value as the waiter read it.
-- Appends '!' (release_plain.lua then tells the waiters) and returns 1 when the value
-- is still that one; returns 0, changing nothing, when the key was released or taken
-- again since: the waiter then asks again at once, as no release will tell it.
local current = redis.call('GET', KEYS[1])
if current ~= ARGV[1] then
  return 0
end
if string.sub(current, -1) ~= '!' then
  redis.call('SET', KEYS[1], current .. '!', 'KEEPTTL')
end
return 1
