-- charge.lua: charge one call's cost to every window of every pool it names,
-- atomically: all windows fit and the call is logged once per pool, or nothing
-- is written anywhere.
--
-- KEYS[1]      quota:{C}:state    hash of the credential (fields below)
-- KEYS[2..]    quota:{C}:log:P    list per pool, in ARGV pool order: flat
--                                 quadruples (time µs, cost, tag id, charge id),
--                                 one per call whatever its cost, oldest first
-- ARGV[1]      now in µs, or "" to read the Redis server clock (TIME)
-- ARGV[2]      charge id: a decimal integer, unique among the credential's
--              charges within the horizon
-- ARGV[3]      "1" when this charge may have been recorded already (the client
--              is sending it again after a lost reply): the log is searched
--              for its id, and a charge found there is not recorded again;
--              "0" otherwise
-- ARGV[4]      idempotency horizon in µs: the log keeps every entry at least
--              this long, so that a resent charge is found
-- ARGV[5]      the tag's state field, "tag:" .. tag, where the tag names who
--              spends ("endpoint<TAB>job"), for usage reports
-- ARGV[6]      number of pools n
-- ARGV[7..6+n] each pool's state field, "pool:" .. name
-- ARGV[7+n..]  per pool: cost, number of windows m, then per window: length µs
--              and budget units
--
-- State fields (numbers packed as little-endian doubles, exact below 2^53):
--   meta           last decision time, charge serial, retain µs (the longest
--                  window seen), expiry µs (when the keys were set to expire)
--   pool:P         head and tail sequence numbers of P's log, window count m,
--                  then per window: length µs, running sum, pointer to its
--                  oldest entry, that entry's time (0: not known)
--   blocked_until, blocked_reason   upstream block (lua/block.lua)
--   tag:T, tagname:N, tags          tag ids; log_lost   when a log vanished
--
-- Returns one of:
--   {1, now, serial, duplicate(0|1), remaining...}   allowed; remaining units per
--                                                    window, in ARGV order
--   {0, now, serial, pool_no, window_no, retry_us}  rejected by that window; the
--                                                    call fits again in retry_us
--   {2, now, serial, blocked_until_us, reason}       credential blocked upstream
-- and raises "COST_EXCEEDS_BUDGET" for a cost that can never fit, and
-- "OLDER_LAYOUT" for keys an older build wrote in another layout.
--
-- An entry at time t is inside a window of length L at time now iff t > now - L.
-- Time never runs backwards for a credential: now is clamped to the latest
-- decision that recorded or slid anything, which can only make entries look
-- younger (more conservative), never older.
--
-- Speed: this runs on Redis's one thread for every call of every client. The
-- common path makes four redis.calls (TIME, HMGET, RPUSH per pool, HSET),
-- reads the log only when an entry leaves a window, and packs each pool's
-- numbers into one field: converting numbers to and from text, and every
-- field and table, costs more than the arithmetic.
--
-- Self-contained on purpose: Redis loads each script alone (EVALSHA has no
-- include), so the few lines that read the clock (TIME, or ARGV[1] in tests)
-- open charge.lua, block.lua and read.lua alike rather than a shared prelude.

local KEYS, ARGV, call, tonumber = KEYS, ARGV, redis.call, tonumber
local spack, sunpack, floor = struct.pack, struct.unpack, math.floor
local state, ENTRY, CHUNK, META = KEYS[1], 4, 16, '<dddd'
-- The packing of a pool's state with m windows ('<ddddddd' for one).
local function layout(m)
  return m == 1 and '<ddddddd' or '<' .. string.rep('d', 3 + 4 * m)
end

-- now as a number, and as the text the log stores (made once: Redis turns a
-- Lua number into text with a slow %.17g on every redis.call)
local now, now_text
if ARGV[1] == '' then
  local t = call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  now_text = string.format('%s%06d', t[1], t[2])
else
  now, now_text = tonumber(ARGV[1]), ARGV[1]
end
local id, resend, horizon = ARGV[2], ARGV[3] == '1', tonumber(ARGV[4])
local tag_field, npools = ARGV[5], tonumber(ARGV[6])

local v = call('HMGET', state, 'meta', 'blocked_until', tag_field, unpack(ARGV, 7, 6 + npools))
local last, serial, stored_retain, expires = 0, 0, 0, nil
if v[1] then last, serial, stored_retain, expires = sunpack(META, v[1]) end
-- Keys written by a build before 2026-11-22 (log triples, a 'serial' field)
-- would be misread: refuse them before writing anything.
if not v[1] and call('HEXISTS', state, 'serial') == 1 then return redis.error_reply('OLDER_LAYOUT keys written by an older build') end
local blocked_until = tonumber(v[2]) or 0
if now < last then now, now_text = last, string.format('%d', last) end

-- Slide window b of pool pv (see pool:P above) over log: drop from its sum
-- the entries at or before cutoff. False when the log is shorter than the
-- state says.
local function slide(log, pv, b, cutoff)
  while pv[b + 2] < pv[2] and (pv[b + 3] == 0 or pv[b + 3] <= cutoff) do
    local idx = (pv[b + 2] - pv[1]) * ENTRY
    local e = call('LRANGE', log, idx, idx + ENTRY * CHUNK - 1)
    if #e == 0 then return false end
    pv[b + 3] = 0
    for j = 1, #e, ENTRY do
      local t = tonumber(e[j])
      if t > cutoff then
        pv[b + 3] = t
        return true
      end
      pv[b + 1] = pv[b + 1] - tonumber(e[j + 1])
      pv[b + 2] = pv[b + 2] + 1
    end
  end
  return true
end

-- Each pool's state, brought up to now. A pool seen for the first time, or
-- whose windows changed, or whose state and log are out of step, is counted
-- afresh from its log.
local pools, lost, longest = {}, false, horizon
local a = 7 + npools -- where the pool's layout starts in ARGV
for p = 1, npools do
  local log, cost, m = KEYS[1 + p], tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  local pv = v[3 + p]
  -- (unpacked as stored: the configuration may have changed its windows)
  pv = pv and pv ~= '' and { sunpack(layout((#pv / 8 - 3) / 4), pv) }
  local fresh = not pv or pv[3] ~= m
  for w = 1, m do
    local len, budget = tonumber(ARGV[a + 2 * w]), tonumber(ARGV[a + 2 * w + 1])
    if cost > budget then return redis.error_reply('COST_EXCEEDS_BUDGET pool ' .. p) end
    if len > longest then longest = len end
    if not fresh and pv[4 * w] ~= len then fresh = true end
  end
  for _ = 1, 2 do
    if fresh then
      local head = pv and pv[1] or 0
      local total, all = 0, call('LRANGE', log, 0, -1)
      for j = 2, #all, ENTRY do total = total + tonumber(all[j]) end
      pv = { head, head + #all / ENTRY, m }
      for w = 1, m do
        local b = 4 * w
        pv[b], pv[b + 1], pv[b + 2], pv[b + 3] = tonumber(ARGV[a + 2 * w]), total, head, 0
      end
    end
    local ok = true
    for w = 1, m do
      ok = slide(log, pv, 4 * w, now - pv[4 * w]) and ok
    end
    if ok or fresh then break end
    -- The log is shorter than the state says: it vanished (expired, evicted,
    -- or a Redis without persistence restarted). Say so, and count afresh.
    lost, fresh = true, true
  end
  pools[p] = pv
  a = a + 2 + 2 * m
end
local retain = math.max(stored_retain, longest)

-- The units left in every window, in ARGV order, after the fields of reply.
local function remaining(reply)
  local r, a = #reply, 7 + npools
  for p = 1, npools do
    local pv = pools[p]
    for w = 1, pv[3] do
      reply[r + w] = tonumber(ARGV[a + 2 * w + 1]) - pv[4 * w + 1]
    end
    r, a = r + pv[3], a + 2 + 2 * pv[3]
  end
  return reply
end

-- The HSET arguments that save every pool's state, then any given after.
local u, n = {}, 0
local function save_pools()
  for p = 1, npools do
    local pv = pools[p]
    u[n + 1] = ARGV[6 + p]
    u[n + 2] = pv.rebuild and '' or spack(layout(pv[3]), unpack(pv, 1, 3 + 4 * pv[3]))
    n = n + 2
  end
end

-- Save the slid windows and the decision's time, which later decisions
-- never go below, without recording anything.
local function save_slid()
  save_pools()
  call('HSET', state, 'meta', spack(META, now, serial, stored_retain, expires or 0), unpack(u, 1, n))
end

-- A resent charge already in the log (of its first pool) is answered as it
-- was, and not recorded again. Only resends pay for the search.
if resend then
  local pv, from, found, done = pools[1], pools[1][2], false, false
  while not (found or done) and from > pv[1] do
    local n = math.min(CHUNK, from - pv[1])
    from = from - n
    local e = call('LRANGE', KEYS[2], (from - pv[1]) * ENTRY, (from - pv[1] + n) * ENTRY - 1)
    done = #e == 0
    for j = #e - ENTRY + 1, 1, -ENTRY do
      if tonumber(e[j]) <= now - horizon then
        done = true
        break
      end
      if e[j + 3] == id then
        found = true
        break
      end
    end
  end
  if found then
    save_slid()
    return remaining({ 1, now, serial, 1 })
  end
end

if blocked_until > now then
  return { 2, now, serial, blocked_until, call('HGET', state, 'blocked_reason') or '' }
end

-- Does the call fit every window? If not, it fits again at the latest of the
-- times at which each short window has shed enough units.
local worst_p, worst_w, worst_retry
a = 7 + npools
for p = 1, npools do
  local pv = pools[p]
  for w = 1, pv[3] do
    local b = 4 * w
    local need = pv[b + 1] + tonumber(ARGV[a]) - tonumber(ARGV[a + 2 * w + 1])
    if need > 0 then
      local freed, at, ptr = 0, nil, pv[b + 2]
      while at == nil and ptr < pv[2] do
        local idx = (ptr - pv[1]) * ENTRY
        local e = call('LRANGE', KEYS[1 + p], idx, idx + ENTRY * CHUNK - 1)
        if #e == 0 then break end
        for j = 1, #e, ENTRY do
          freed = freed + tonumber(e[j + 1])
          ptr = ptr + 1
          if freed >= need then
            at = tonumber(e[j]) + pv[b]
            break
          end
        end
      end
      local retry = (at or (now + pv[b])) - now
      if worst_retry == nil or retry > worst_retry then
        worst_p, worst_w, worst_retry = p, w, retry
      end
    end
  end
  a = a + 2 + 2 * pv[3]
end
if worst_retry ~= nil then
  -- The slid sums are exact; keep them so the next call starts here.
  save_slid()
  return { 0, now, serial, worst_p, worst_w, worst_retry }
end

-- Idle keys expire a little past the longest window (or the block). Setting
-- the expiry on every charge would cost calls, so it is set 1/8 window ahead
-- and renewed only when it no longer covers the newest entry.
local keep = retain + 60000000
if blocked_until - now + 60000000 > keep then keep = blocked_until - now + 60000000 end
local refresh = expires == nil or expires < now + keep
if refresh then expires = now + keep + floor(retain / 8) end
local ttl_ms = floor((expires - now) / 1000)

-- Record the call once per pool and add its cost to every window.
local tag_id = v[3]
if not tag_id then
  tag_id = call('HINCRBY', state, 'tags', 1)
  u[1], u[2], u[3], u[4] = tag_field, tag_id, 'tagname:' .. tag_id, string.sub(tag_field, 5)
  n = 4
end
serial = serial + 1
a = 7 + npools
for p = 1, npools do
  local pv, log, cost = pools[p], KEYS[1 + p], tonumber(ARGV[a])
  local len = call('RPUSH', log, now_text, ARGV[a], tag_id, id)
  pv[2] = pv[2] + 1
  if len ~= (pv[2] - pv[1]) * ENTRY then
    -- The log is not what the state says (a key expired or was evicted):
    -- the pool is counted afresh from what the log holds on the next call.
    lost, pv.rebuild = true, true
  end
  if refresh or len == ENTRY then call('PEXPIRE', log, ttl_ms) end
  for w = 1, pv[3] do
    local b = 4 * w
    if pv[b + 2] == pv[2] - 1 then pv[b + 3] = now end -- the window was empty
    pv[b + 1] = pv[b + 1] + cost
  end
  a = a + 2 + 2 * pv[3]
end

-- Entries older than the longest window ever seen (and the horizon) are out
-- of every window: trim them. The pointer of a window that long already says
-- how many; otherwise count them.
for p = 1, npools do
  local pv = pools[p]
  if not pv.rebuild then
    local oldest
    for w = 1, pv[3] do
      if pv[4 * w] == retain then oldest = pv[4 * w + 2] end
    end
    if oldest == nil then
      local b = 4 + 4 * pv[3] -- scratch space past the packed fields
      pv[b], pv[b + 1], pv[b + 2], pv[b + 3] = retain, 0, pv[1], 0
      slide(KEYS[1 + p], pv, b, now - retain)
      oldest = pv[b + 2]
    end
    if oldest > pv[1] then
      call('LTRIM', KEYS[1 + p], (oldest - pv[1]) * ENTRY, -1)
      pv[1] = oldest
    end
  end
end

save_pools()
if lost then
  u[n + 1], u[n + 2] = 'log_lost', now
  n = n + 2
end
call('HSET', state, 'meta', spack(META, now, serial, retain, expires), unpack(u, 1, n))
if refresh then call('PEXPIRE', state, ttl_ms) end

return remaining({ 1, now, serial, 0 })
