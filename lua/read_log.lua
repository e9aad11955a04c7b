-- read_log.lua: a bounded slice of one pool's log or of its index, for a
-- usage report (lua/read.lua says what there is to read). Read-only.
--
-- KEYS[1]   quota:{C}:state    hash of the credential
-- KEYS[2]   quota:{C}:log:P    the pool's log
-- KEYS[3]   quota:{C}:index:P  its index
-- ARGV[1]   the pool's state field, "pool:" .. name
-- ARGV[2]   "calls" or "blocks": what the ranges below number
-- ARGV[3..] ranges [from, to) of call numbers or block numbers, at most
--           LIMIT calls or blocks in all
--
-- Returns, per range, the flat list of what the log still holds of it:
-- calls as (time µs, cost, tag id, charge id) quadruples, blocks as their
-- packed records (see lua/charge.lua), oldest first, preceded by the number
-- of the first one returned. Calls and blocks trimmed since lua/read.lua
-- ran (they had left the retention) are simply not returned.

local LIMIT, BLOCK = 1024, 128
local pv = redis.call('HGET', KEYS[1], ARGV[1])
local head, tail = 0, redis.call('LLEN', KEYS[2]) / 4
if pv and #pv >= 16 then head, tail = struct.unpack('<dd', pv) end
local blocks = ARGV[2] == 'blocks'
local base, key, width = head, KEYS[2], 4
if blocks then
  local indexed = redis.call('LLEN', KEYS[3])
  base, key, width, tail = math.floor(tail / BLOCK) - indexed, KEYS[3], 1, math.floor(tail / BLOCK)
end
local reply, total = {}, 0
for k = 3, #ARGV, 2 do
  local from = math.max(tonumber(ARGV[k]), base)
  local to = math.min(tonumber(ARGV[k + 1]), tail)
  total = total + math.max(0, to - from)
  if total > LIMIT then return redis.error_reply('TOO_MUCH at most ' .. LIMIT .. ' a call') end
  local got = {}
  if to > from then got = redis.call('LRANGE', key, (from - base) * width, (to - base) * width - 1) end
  reply[#reply + 1] = { from, got }
end
return reply
