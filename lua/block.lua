-- block.lua: mark a credential blocked until a time (the upstream said its own
-- quota is spent). Charges are then rejected in the same atomic step that
-- evaluates the windows. A later block never shortens an earlier one.
--
-- KEYS[1]  quota:{C}:state  hash of the credential
-- ARGV[1]  now in µs, or "" to read the Redis server clock (TIME)
-- ARGV[2]  blocked until, µs since the Unix epoch (a time computed from a
--          reading of this server's clock), or "" to use ARGV[3]
-- ARGV[3]  blocked for this many µs from now (a Retry-After), when ARGV[2] is ""
-- ARGV[4]  reason (short text, no secrets)
--
-- Returns {now, blocked_until} as stored after the call.
--
-- Self-contained on purpose: Redis loads each script alone (EVALSHA has no
-- include), so the few lines that read the clock (TIME, or ARGV[1] in tests)
-- open charge.lua, block.lua and read.lua alike rather than a shared prelude.

local state = KEYS[1]
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
end
-- (min: a duration too long for a double's exact integers is still "long")
local until_us = tonumber(ARGV[2]) or now + math.min(tonumber(ARGV[3]), 2 ^ 52)
local current = tonumber(redis.call('HGET', state, 'blocked_until')) or 0
if until_us > current then
  redis.call('HSET', state, 'blocked_until', string.format('%d', until_us), 'blocked_reason', ARGV[4])
  current = until_us
end
local ttl = redis.call('PTTL', state)
local need = math.floor((current - now) / 1000) + 60000
if ttl >= 0 and ttl < need or ttl == -1 then
  redis.call('PEXPIRE', state, need)
end
return { now, current }
