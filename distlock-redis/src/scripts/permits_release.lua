-- Releases one grant of permits. KEYS[1]: the grants; KEYS[2]: the name's hash.
-- ARGV[1]: the owner token; ARGV[2]: the name's channel. Returns 1 when released, 0
-- when this owner held nothing unexpired.
local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local until_ms = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not until_ms then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], 'g:' .. ARGV[1])
if tonumber(until_ms) <= now_ms then
  return 0
end
redis.call('PUBLISH', ARGV[2], '')
return 1
