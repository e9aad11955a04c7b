-- unblock.lua: lift a credential's upstream block (`portion unblock`), for an
-- operator who knows the upstream's quota is back before the block ends,
-- and forget the units the upstream said others spent (the same word from
-- the upstream, the same lever: an answer that overstated them must not
-- hold the pools until their reset).
--
-- KEYS[1]  portion:{C}:state  hash of the credential
--
-- Returns {blocked_until, blocked_reason} as they were (0 and "" when the
-- credential was not blocked). The block fields (and the backoff's history,
-- see block.lua) are removed, and each
-- pool's others' units and their end (the last two numbers of its packed
-- state, see charge.lua) are zeroed; nothing else changes, and the hash
-- keeps its TTL.

local state = KEYS[1]
local was = redis.call('HMGET', state, 'blocked_until', 'blocked_reason')
redis.call('HDEL', state, 'blocked_until', 'blocked_reason', 'blocked_backoff')
local cursor = '0'
repeat
  local r = redis.call('HSCAN', state, cursor, 'MATCH', 'pool:*', 'COUNT', 100)
  cursor = r[1]
  for i = 1, #r[2], 2 do
    local packed = r[2][i + 1]
    local n = #packed / 8
    -- (this build's layout only: a multiple of WIN numbers, at least FIXED)
    if n >= $FIXED and n % $WIN == 0 then
      local layout = '<' .. string.rep('d', n)
      local pv = { struct.unpack(layout, packed) }
      -- (others' units and until when, past the windows)
      local o, ou = n - $FIXED + $OTHERS, n - $FIXED + $OTHERS_UNTIL
      if pv[o] ~= 0 or pv[ou] ~= 0 then
        pv[o], pv[ou] = 0, 0
        redis.call('HSET', state, r[2][i], struct.pack(layout, unpack(pv, 1, n)))
      end
    end
  end
until cursor == '0'
return { tonumber(was[1]) or 0, was[2] or '' }
