-- Renews one grant of permits. KEYS[1]: the grants; KEYS[2..4]: the name's hash,
-- places and terms. ARGV[1]: the owner token; ARGV[2]: the TTL in ms; ARGV[3]: how
-- long the name's record is kept (ms). Returns 1 when renewed, 0 when not held.
local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local until_ms = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not until_ms or tonumber(until_ms) <= now_ms then
  return 0
end
redis.call('ZADD', KEYS[1], now_ms + tonumber(ARGV[2]), ARGV[1])
local keep_ms = tonumber(ARGV[3])
for i = 1, 4 do
  local left = redis.call('PTTL', KEYS[i])
  if left >= 0 and left < keep_ms then
    redis.call('PEXPIRE', KEYS[i], keep_ms)
  end
end
return 1
