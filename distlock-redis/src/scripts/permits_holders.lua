-- The live grants of a name. KEYS[1]: the grants; KEYS[2]: the name's hash.
-- Returns, per grant, its "<fence>:<count>:<0|1>:<value>" and its pttl.
local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now_ms, '+inf', 'WITHSCORES')
local out = {}
for i = 1, #live, 2 do
  local grant = redis.call('HGET', KEYS[2], 'g:' .. live[i])
  if grant then
    table.insert(out, grant)
    table.insert(out, tostring(tonumber(live[i + 1]) - now_ms))
  end
end
return out
