-- block.lua: mark a credential blocked until a time (the upstream said its own
-- quota is spent). Charges are then rejected in the same atomic step that
-- evaluates the windows. A later block never shortens an earlier one.
--
-- KEYS[1]  portion:{C}:state  hash of the credential
-- ARGV[1]  now in µs, or "" to read the Redis server clock (TIME)
-- ARGV[2]  blocked until, µs since the Unix epoch (a time computed from a
--          reading of this server's clock), or "" to use ARGV[3]
-- ARGV[3]  blocked for this many µs from now (a Retry-After), when ARGV[2] is ""
-- ARGV[4]  reason (short text, no secrets)
-- ARGV[5], ARGV[6]  (a backoff: a refusal that said nothing of when) the
--          shortest and longest block, µs: ARGV[3] is then worked out from
--          the previous backoff's end and length, kept in the field
--          blocked_backoff (packed doubles), as src/ledger/decision.rs's
--          backoff_len does for the embedded store: as long again while it
--          is in force, twice as long within `longest` after its end, else
--          the shortest; never past the longest.
--
-- Returns {now, blocked_until} as stored after the call.
--
-- Built at load (src/ledger/redis/scripts.rs) after the layout's constants,
-- lua/shared/layout.lua and lua/shared/clock.lua (now: ARGV[1]'s clock).

local state = KEYS[1]
local after, keep_backoff = tonumber(ARGV[3]), 0
if ARGV[5] then
  local shortest, longest = tonumber(ARGV[5]), tonumber(ARGV[6])
  local was = redis.call('HGET', state, 'blocked_backoff')
  local prev_until, prev_len = 0, 0
  if was then prev_until, prev_len = struct.unpack('<dd', was) end
  if prev_len > 0 and now < prev_until then
    after = prev_len
  elseif prev_len > 0 and now - prev_until <= longest then
    after = prev_len * 2
  else
    after = shortest
  end
  after = math.max(math.min(shortest, longest), math.min(after, longest))
  redis.call('HSET', state, 'blocked_backoff', struct.pack('<dd', now + after, after))
  -- (kept while a repeat may come: `longest` after the block's end)
  keep_backoff = after + longest
end
-- (min: a duration too long for a double's exact integers is still "long")
local until_us = tonumber(ARGV[2]) or now + math.min(after, 2 ^ 52)
local current = tonumber(redis.call('HGET', state, 'blocked_until')) or 0
if until_us > current then
  redis.call('HSET', state, 'blocked_until', string.format('%d', until_us), 'blocked_reason', ARGV[4])
  current = until_us
end
local ttl = redis.call('PTTL', state)
local need = math.floor((math.max(current - now, keep_backoff)) / 1000) + MINUTE / 1000
if ttl >= 0 and ttl < need or ttl == -1 then
  redis.call('PEXPIRE', state, need)
end
return { now, current }
