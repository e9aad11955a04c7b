-- read.lua: what a credential's log holds, without spending or changing
-- anything, in bounded work: the log itself is read afterwards, in bounded
-- slices, by lua/read_log.lua. Read-only, so it may run as EVAL_RO / on a
-- replica.
--
-- KEYS[1]        quota:{C}:state    hash of the credential
-- KEYS[2..1+n]   quota:{C}:log:P    the log of each pool asked about
-- KEYS[2+n..]    quota:{C}:index:P  its index, in the same order
-- ARGV[1]        now in µs, or "" to read the Redis server clock (TIME)
-- ARGV[2..]      each pool's state field, "pool:" .. name, in KEYS order
--
-- Returns {now, serial, blocked_until, blocked_reason, tags, retain,
-- then per pool: lost, head, tail, first indexed block, indexed blocks,
-- dead mark}
-- where tags is a flat list (id, "endpoint<TAB>job", ...), retain is the
-- stored retention in µs, lost is when the pool's log was found lost (0:
-- never; now: it is missing at this read), head and tail number the calls
-- the log holds (head <= s < tail) and the index holds the records of the
-- blocks [first, first + indexed), and calls at or before the dead mark
-- count in no window (see lua/charge.lua). Raises
-- "OLDER_LAYOUT" for keys an older build wrote in another layout.
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
local g = redis.call('HMGET', state, 'meta', 'blocked_until', 'blocked_reason')
local last, serial, retain, lost_all = 0, 0, 0, 0
if g[1] then last, serial, retain = struct.unpack('<ddd', g[1]) end
if g[1] and #g[1] >= 40 then lost_all = struct.unpack('<d', g[1], 33) end
-- Keys of a build before 2026-11-22 (log triples) would be misread.
if not g[1] and redis.call('HEXISTS', state, 'serial') == 1 then return redis.error_reply('OLDER_LAYOUT keys written by an older build') end
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
for k = 1, n do
  local calls = redis.call('LLEN', KEYS[1 + k]) / 4
  local pv, lost = redis.call('HGET', state, ARGV[1 + k]), lost_all
  local head, tail, dead = 0, calls, 0
  if pv and #pv >= 40 then
    local fields = #pv / 8
    head, tail = struct.unpack('<dd', pv)
    -- (the loss time and dead mark close this build's layout; the build
    -- before the dead mark closed it with the loss time)
    if fields % 4 == 2 then
      lost, dead = math.max(lost, (struct.unpack('<d', pv, #pv - 15))), struct.unpack('<d', pv, #pv - 7)
    elseif fields % 4 == 1 then
      lost = math.max(lost, (struct.unpack('<d', pv, #pv - 7)))
    end
    -- A log shorter than its state says is lost, noticed or not.
    if calls < tail - head and lost == 0 then lost = now end
  end
  local indexed = redis.call('LLEN', KEYS[1 + n + k])
  for _, x in ipairs({ lost, head, tail, math.floor(tail / 128) - indexed, indexed, dead }) do
    reply[#reply + 1] = x
  end
end
return reply
