-- One step on a fenced resource, atomic as every script is.
-- KEYS[1]: the key holding the value (a string, or a hash when ARGV[4] names a field)
-- KEYS[2]: the key holding the fence (a string), or KEYS[1] again when ARGV[5] names
--          the hash field holding it
-- ARGV[1]: the offered fence, in decimal without leading zeros
-- ARGV[2]: 'put' (compare, store the fence and the value), 'claim' (compare, store the
--          fence, return the value) or 'peek' (return the fence and the value)
-- ARGV[3]: the value, for 'put'
-- ARGV[4]: the hash field of the value, or '' for a string
-- ARGV[5]: the hash field of the fence, or '' for a string key
-- Returns {1, fence, value} when accepted (or peeked), {0, fence, false} when stale; a
-- missing fence or value is false (nil). (Lua tables end at their first nil, so
-- missing values are false, never nil.)

local function read(key, field)
  if field == '' then
    return redis.call('GET', key)
  end
  return redis.call('HGET', key, field)
end

local function write(key, field, value)
  if field == '' then
    redis.call('SET', key, value)
  else
    redis.call('HSET', key, field, value)
  end
end

-- Fences compare as numbers, never as text or as Lua's doubles (exact only up to
-- 2^53): a longer decimal is larger, and equal lengths compare digit by digit.
local function above(a, b)
  if #a ~= #b then
    return #a > #b
  end
  return a > b
end

local current = read(KEYS[2], ARGV[5])
if ARGV[2] == 'peek' then
  return {1, current, read(KEYS[1], ARGV[4])}
end
if current and above(current, ARGV[1]) then
  return {0, current, false}
end
if current ~= ARGV[1] then
  write(KEYS[2], ARGV[5], ARGV[1])
end
if ARGV[2] == 'put' then
  write(KEYS[1], ARGV[4], ARGV[3])
  return {1, ARGV[1], false}
end
return {1, ARGV[1], read(KEYS[1], ARGV[4])}
