-- read.lua: what a credential's log holds, without spending or changing
-- anything, in bounded work: the log itself is read afterwards, in bounded
-- slices, by lua/read_log.lua. Read-only, so it may run as EVAL_RO / on a
-- replica.
--
-- KEYS[1]        portion:{C}:state    hash of the credential
-- KEYS[2..1+n]   portion:{C}:log:P    the prefix of each pool's log segments
-- KEYS[2+n..]    portion:{C}:index:P  that of its index, in the same order
-- ARGV[1]        now in µs, or "" to read the Redis server clock (TIME)
-- ARGV[2..1+n]   each pool's state field, "pool:" .. name, in KEYS order
-- ARGV[2+n..]    each pool's longest window as configured (how long a call
--                counts in it, µs), in the same order
--
-- Returns {now, serial, blocked_until, blocked_reason, tags, retain,
-- then per pool: lost, head, tail, first indexed block, indexed blocks,
-- dead mark, units others spent, until when, calls recorded in observe mode
-- though they did not fit, the latest one's time, reservations not settled
-- yet (packed (call number, time, units) triples: lua/charge.lua)}
-- where tags is a flat list (id, "endpoint<TAB>job", ...), retain is the
-- stored retention in µs, lost is when the pool's log was found lost (0:
-- never; now: it is missing at this read), head and tail number the calls
-- the log holds (head <= s < tail), the index may hold the records of the
-- blocks [first, first + indexed) (lua/read_log.lua returns those it holds),
-- and calls at or before the dead mark
-- count in no window (see lua/charge.lua). Raises
-- "OLDER_LAYOUT" for keys an older build wrote in another layout.
--
-- Built at load (src/ledger/redis/scripts.rs) after the layout's constants,
-- lua/shared/layout.lua and lua/shared/clock.lua (now: ARGV[1]'s clock).

local state = KEYS[1]
local g = redis.call('HMGET', state, 'meta', 'blocked_until', 'blocked_reason')
local last, serial, retain, lost_all = 0, 0, 0, 0
-- Keys of an older build would be misread (as lua/charge.lua refuses
-- them: a meta of four numbers, a 'serial' field, a pool state of a number
-- of fields that is not a multiple of 4, below).
local older = redis.error_reply('OLDER_LAYOUT keys written by an older build')
if g[1] and #g[1] ~= 8 * $META_FIELDS then return older end
local _
if g[1] then last, serial, retain, _, lost_all = struct.unpack(META, g[1]) end
if not g[1] and redis.call('HEXISTS', state, 'serial') == 1 then return older end
if now < last then now = last end
local tags = {}
local all = redis.call('HGETALL', state)
for j = 1, #all, 2 do
  if string.sub(all[j], 1, 8) == 'tagname:' then
    tags[#tags + 1] = string.sub(all[j], 9)
    tags[#tags + 1] = all[j + 1]
  end
end
local reply = { now, serial, tonumber(g[2]) or 0, g[3] or '', tags, retain }
local n = (#KEYS - 1) / 2
-- The length of segment k of the log KEYS[1 + k] (lua/charge.lua).
local function seg_len(key, k) return redis.call('LLEN', key .. ':' .. k) / ENTRY end
for k = 1, n do
  local pv, lost = redis.call('HGET', state, ARGV[1 + k]), lost_all
  local head, tail, dead, others, others_until = 0, 0, 0, 0, 0
  if pv and (#pv / 8) % $WIN ~= 0 then return older end
  if pv and #pv >= 8 * $FIXED then
    head, tail = struct.unpack('<dd', pv)
    -- (the expiry, loss time and dead mark, then others' units and until
    -- when, close the layout)
    local expires
    expires, lost, dead, others, others_until = struct.unpack('<ddddd', pv, #pv - 8 * ($FIXED - $EXPIRES + 1) + 1)
    lost = math.max(lost, lost_all)
    if expires > 0 and now >= expires then
      -- (past its expiry the log held nothing that counts: lua/charge.lua)
      head = tail
    elseif tail > head and lost == 0 then
      local kt = math.floor((tail - 1) / SEG)
      -- Segments before the tail's that expired held no call that
      -- counts (lua/charge.lua, past_expired): the head passes them
      -- when the next one's first call counts in no window of the pool
      -- (nor in the retention). (Read-only: a charge unlinks their index.)
      local cut = math.max(now - (tonumber(ARGV[1 + n + k]) or math.huge), now - retain, dead)
      for _ = 1, 32 do
        local kh = math.floor(head / SEG)
        if kh >= kt or redis.call('EXISTS', KEYS[1 + k] .. ':' .. kh) == 1 then break end
        local first = tonumber(redis.call('LINDEX', KEYS[1 + k] .. ':' .. (kh + 1), 0))
        if not first or first > cut then break end
        head = (kh + 1) * SEG
      end
      -- A log whose first or last segment is not as long as its state
      -- says is lost, noticed or not.
      local kh = math.floor(head / SEG)
      if seg_len(KEYS[1 + k], kh) ~= math.min(tail, (kh + 1) * SEG) - head
        or (kt ~= kh and seg_len(KEYS[1 + k], kt) ~= tail - kt * SEG) then
        lost = now
      end
    end
  elseif seg_len(KEYS[1 + k], 0) > 0 then
    -- No state, but a log: the state was lost alone (lua/charge.lua).
    lost = now
  end
  -- (the index may hold the blocks from the head's on: lua/read_log.lua
  -- returns those it has)
  local first = math.floor(head / BLOCK)
  local indexed = math.max(0, math.floor(tail / BLOCK) - first)
  local name = string.sub(ARGV[1 + k], 6)
  local seen = redis.call('HMGET', state, 'observed:' .. name, 'observed_at:' .. name, 'reserved:' .. name)
  local observed, observed_at = tonumber(seen[1]) or 0, tonumber(seen[2]) or 0
  for _, x in ipairs({ lost, head, tail, first, indexed, dead, others, others_until, observed, observed_at }) do
    reply[#reply + 1] = x
  end
  reply[#reply + 1] = seen[3] or ''
end
return reply
