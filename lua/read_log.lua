-- read_log.lua: a bounded slice of one pool's log or of its index, for a
-- usage report (lua/read.lua says what there is to read). Read-only.
--
-- KEYS[1]   portion:{C}:state    hash of the credential
-- KEYS[2]   portion:{C}:log:P    the prefix of the pool's log segments
-- KEYS[3]   portion:{C}:index:P  that of its index's segments
-- ARGV[1]   the pool's state field, "pool:" .. name
-- ARGV[2]   "calls" or "blocks": what the ranges below number
-- ARGV[3..] ranges [from, to) of call numbers or block numbers, at most
--           LIMIT calls or blocks in all
--
-- Returns, per range, the flat list of what the log still holds of it:
-- calls as (time µs, cost, tag id, charge id) quadruples, preceded by the
-- number of the first one returned; blocks as their packed records (see
-- lua/charge.lua), each naming its block: a block whose record is missing
-- is left out, and the caller reads its calls. Calls and blocks trimmed
-- since lua/read.lua ran (they had left the retention) are simply not
-- returned.

-- (after the layout's constants: src/ledger/redis/scripts.rs)
local LIMIT = 1024
local floor, min, max = math.floor, math.min, math.max
local pv = redis.call('HGET', KEYS[1], ARGV[1])
local head, tail = 0, nil
if pv and #pv >= 16 then head, tail = struct.unpack('<dd', pv) end
local blocks = ARGV[2] == 'blocks'
-- From, to within segment k of the list `prefix:k` whose first element
-- is item `start` (width elements an item).
local function range(prefix, k, start, from, to, width)
  return redis.call('LRANGE', prefix .. ':' .. k, (from - start) * width, (to - start) * width - 1)
end
local reply, total = {}, 0
for a = 3, #ARGV, 2 do
  local from, to = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  total = total + max(0, to - from)
  if total > LIMIT then return redis.error_reply('TOO_MUCH at most ' .. LIMIT .. ' a call') end
  local got, first = {}, nil
  if blocks then
    -- (a segment's records are consecutive blocks ending with its last
    -- complete one; read.lua's tail, or the state's, says which that is)
    local top = floor((tail or 0) / BLOCK) - 1
    while from < min(to, top + 1) do
      local k = floor(from / IXSEG)
      local upto = min(to, top + 1, (k + 1) * IXSEG)
      local key = KEYS[3] .. ':' .. k
      local start = min(top, (k + 1) * IXSEG - 1) - redis.call('LLEN', key) + 1
      local lo = max(from, start)
      if upto > lo then
        for _, r in ipairs(range(KEYS[3], k, start, lo, upto, 1)) do got[#got + 1] = r end
      end
      from = upto
    end
    first = tonumber(ARGV[a])
  else
    if not tail then tail = head + redis.call('LLEN', KEYS[2] .. ':0') / ENTRY end
    from, to = max(from, head), min(to, tail)
    first = from
    while from < to do
      local k = floor(from / SEG)
      local upto = min(to, (k + 1) * SEG)
      for _, x in ipairs(range(KEYS[2], k, max(head, k * SEG), from, upto, ENTRY)) do got[#got + 1] = x end
      from = upto
    end
  end
  reply[#reply + 1] = { first, got }
end
return reply
