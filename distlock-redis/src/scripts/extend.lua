-- Compare-and-PEXPIRE. KEYS[1]: the lock; KEYS[2]: its fence counter. ARGV[1]: the
-- owner token; ARGV[2]: the TTL in milliseconds; ARGV[3]: the counter's lifetime (the
-- TTL plus the grace). Returns the fence when extended, nil when not held (never
-- re-creates).
local current = redis.call('GET', KEYS[1])
if current and string.sub(current, 1, 33) == ARGV[1] .. ':' then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  return string.match(current, '%d+', 34)
end
return false
