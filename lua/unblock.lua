-- unblock.lua: lift a credential's upstream block (`quota unblock`), for an
-- operator who knows the upstream's quota is back before the block ends.
--
-- KEYS[1]  quota:{C}:state  hash of the credential
--
-- Returns {blocked_until, blocked_reason} as they were (0 and "" when the
-- credential was not blocked). The block fields are removed; nothing else
-- changes, and the hash keeps its TTL.

local state = KEYS[1]
local was = redis.call('HMGET', state, 'blocked_until', 'blocked_reason')
redis.call('HDEL', state, 'blocked_until', 'blocked_reason')
return { tonumber(was[1]) or 0, was[2] or '' }
