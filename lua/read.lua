-- read.lua: read a credential's log without spending or changing anything.
-- Read-only, so it may run as EVAL_RO / on a replica.
--
-- KEYS[1]    quota:{C}:state  hash of the credential
-- KEYS[2..]  quota:{C}:log:P  one log list per pool asked about
-- ARGV[1]    now in µs, or "" to read the Redis server clock (TIME)
-- ARGV[2..]  each pool's state field, "pool:" .. name, in KEYS order
--
-- Returns {now, serial, blocked_until, blocked_reason, tags, retain,
-- lost1, log1, lost2, log2, ...} where tags is a flat list (id,
-- "endpoint<TAB>job", ...), retain is the stored retention in µs, lostK is
-- when pool K's log was found lost (0: never; now: it is missing at this
-- read) and each log is the pool's flat list of (time µs, cost, tag id, charge
-- id) quadruples, oldest first (see lua/charge.lua for the fields of the
-- state hash). Raises "OLDER_LAYOUT" for keys an older build wrote in another
-- layout.
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
for k = 2, #KEYS do
  local log = redis.call('LRANGE', KEYS[k], 0, -1)
  local pv, lost = redis.call('HGET', state, ARGV[k]), lost_all
  if pv and #pv >= 40 then
    local fields = #pv / 8
    local head, tail = struct.unpack('<dd', pv)
    -- (the loss time is the last field of this build's layout)
    if fields % 4 == 1 then lost = math.max(lost, (struct.unpack('<d', pv, #pv - 7))) end
    -- A log shorter than its state says is lost, noticed or not.
    if #log < (tail - head) * 4 and lost == 0 then lost = now end
  end
  reply[#reply + 1] = lost
  reply[#reply + 1] = log
end
return reply
