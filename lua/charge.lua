-- charge.lua: charge one call's cost to every window of every pool it names,
-- atomically: all windows fit and the call is logged once per pool, or nothing
-- is written anywhere.
--
-- KEYS[1]      quota:{C}:state    hash of the credential (fields below)
-- KEYS[2..1+n] quota:{C}:log:P    per pool, in ARGV pool order: the prefix
--                                 of its log's segments (below)
-- KEYS[2+n..]  quota:{C}:index:P  per pool, in ARGV pool order: the prefix
--                                 of its index's segments (below)
-- ARGV[1]      now in µs, or "" to read the Redis server clock (TIME)
-- ARGV[2]      charge id: a decimal integer, unique among the credential's
--              charges within the horizon
-- ARGV[3]      "1" when this charge may have been recorded already (the client
--              is sending it again after a lost reply): the log is searched
--              for its id, and a charge found there is not recorded again;
--              "0" otherwise; "2" for no charge at all but the upstream's
--              word on its one pool (below: observe); plus 4 in observe
--              mode: a call that does not fit is recorded all the same
--              (the upstream is the only limit), and counted per pool in
--              the state fields observed:P and observed_at:P; plus 8 when
--              some pools' costs are estimates, settled after the call
--              (lua/settle.lua): those pools are reserved (below)
-- ARGV[4]      idempotency horizon in µs: the log keeps every entry at least
--              this long, so that a resent charge is found
-- ARGV[5]      the tag's state field, "tag:" .. tag, where the tag names who
--              spends ("endpoint<TAB>job"), for usage reports
-- ARGV[6]      the charge serial the caller has seen this credential reach
--              (0: none): a store that reports fewer has lost its log
-- ARGV[7]      number of pools n
-- ARGV[8..7+n] each pool's state field, "pool:" .. name
-- ARGV[8+n..]  per pool: cost, number of windows m, then per window: length µs
--              and budget units; a calendar window (aligned) gives minus its
--              period's length
-- calendar:    then per calendar window, in order, CAL local midnights (µs)
--              starting the days around the caller's clock: its period is
--              found among them on this clock (src/ledger/calendar.rs)
-- observe:     then the upstream's remaining units, its limit, when its
--              count resets (µs on this clock, or 0), else how long until it
--              does (µs, or -1: the longest window)
-- reserve:     or, for a charge with 8, a "0" or "1" per pool, in order: "1"
--              where its cost is an estimate
--
-- State fields (numbers packed as little-endian doubles, exact below 2^53):
--   meta           last decision time, charge serial, retain µs (the longest
--                  window seen, at least the horizon), expiry µs (when the
--                  state was set to expire), when the whole log was lost (0: never)
--   pool:P         head and tail sequence numbers of P's log, window count m,
--                  then per window: length µs, running sum, pointer to its
--                  oldest entry, that entry's time (0: not known); then when
--                  P's log was set to expire, when it was lost (0: never),
--                  the time at or before which its entries count in no
--                  window (the retention's cutoff at its latest recorded call),
--                  and the units others spent (the upstream's count above
--                  the ledger's, counted in the pool's longest window) and
--                  until when (older layouts have a number of fields that is
--                  not a multiple of 4)
--   blocked_until, blocked_reason   upstream block (lua/block.lua)
--   reserved:P     P's reservations not settled yet, oldest first: packed
--                  (call number, time, units) triples, the RESERVED newest
--                  whose calls still count (for status; lua/settle.lua
--                  removes a settled one)
--   tag:T, tagname:N, tags          tag ids
--   front:pool:P   the fast path's copy of the calls at P's windows'
--                  pointers (a read of the log at a window's front walks
--                  its list's nodes): per window, SLOT bytes, packed doubles
--                  (first call number, count, then (time, cost) of up to
--                  FRONT calls), only calls more than REACH behind the
--                  newest, whose cost no settle changes any more; '' once
--                  the general path ran (it keeps none)
--
-- The log: a pool's calls are numbered (head <= s < tail); call s sits in
-- the list `quota:{C}:log:P:k`, k = floor(s / SEG), as flat quadruples
-- (time µs, cost, tag id, charge id), one per call whatever its cost, oldest
-- first, at position s - max(head, k * SEG): only the head's segment is ever
-- trimmed from the front. Segments keep every read positional in bounded
-- time: Redis finds a list's middle by walking its nodes, which at 10^7
-- calls in one list took 5 ms.
--
-- The index: call s sits in block floor(s / BLOCK). When a block's last
-- call is logged, its record is appended to the list
-- `quota:{C}:index:P:j`, j = floor(block / IXSEG): packed doubles (first
-- call's time, last call's time, cumulative cost through the block, the
-- block's cost, calls, the block's number, its origin), then (tag id, cost)
-- per tag in the block. A segment's records are consecutive blocks ending
-- with its last complete one. Cumulative costs count from the origin, the
-- first block appended after a missing predecessor: two records of one
-- origin give the cost of the blocks between them, whatever is missing in
-- between since. A record is used only if it names the block asked for.
-- With it a window's new start, its sum and the time at which `need` units
-- free up are a binary search and a read of at most one block, however many
-- calls left at once; and a usage report reads block summaries.
--
-- Returns one of:
--   {1, now, serial, duplicate(0|1), remaining..., call..., p, w, retry,
--    others...}                                      allowed; remaining units per
--                                                    window, in ARGV order, then
--                                                    per pool its entry's call
--                                                    number (-1: a duplicate),
--                                                    for lua/settle.lua; then, in
--                                                    observe mode, the pool and
--                                                    window that would have
--                                                    refused it and the retry (w
--                                                    0: the pool's log was lost;
--                                                    p 0: nothing refused it);
--                                                    then per pool the units of
--                                                    others its remaining counts
--                                                    and in which window
--   {0, now, serial, pool_no, window_no, retry_us}  rejected by that window; the
--                                                    call fits again in retry_us
--   {2, now, serial, blocked_until_us, reason}       credential blocked upstream
--   {3, now, serial, pool_no, lost_at, until}        the pool's log was lost at
--                                                    lost_at: it counts as spent
--                                                    until its longest window passed
--   {4, now, serial, others, until}                  observe: units recorded as
--                                                    spent by others, until when
-- and raises "COST_EXCEEDS_BUDGET" for a cost that can never fit, and
-- "OLDER_LAYOUT" for keys an older build wrote in another layout.
--
-- An entry at time t is inside a window of length L at time now iff t > now - L.
-- Time never runs backwards for a credential: now is clamped to the latest
-- decision that recorded or slid anything, which can only make entries look
-- younger (more conservative), never older.
--
-- Retention, the same rule as the embedded store: entries at or before
-- now - R, where R is the retain stored before this call (at least the
-- horizon), count in no window, even one lengthened since: they may already
-- be gone (trimmed, or expired with an idle log). Nor do entries at or before
-- that cutoff as it stood at the pool's latest recorded call (the pool's
-- dead mark): R may have grown since, and the trim that follows a recorded
-- call is bounded, so such entries may still be in the log, but they count
-- as the ones already trimmed.
--
-- Expiry: every key lives at least as long as its newest entry counts (retain,
-- plus a minute). Each pool's log (its segments and index) carries its own
-- expiry, renewed when the pool is charged; the state hash's covers every
-- log's. A log past that expiry held nothing that counts any more: it is
-- started afresh. A log that vanishes before (eviction, FLUSHDB, a replica
-- promoted without it) makes its pool count as spent until its longest
-- window has passed since the loss. A log of a build before the segments
-- (one list per pool) is adopted as segment 0 when it fits in one.
--
-- Bounded work: no step reads more than a block (or a chunk of one) of the
-- log per window, except where the index lacks blocks (after its keys were
-- evicted), which is walked as before. A resent charge is looked for among
-- the pool's last RESEND calls only (a charge not found is recorded again:
-- counted twice, never forgotten). Calls that left the retention are
-- trimmed TRIM at a time from the head's segment, and segments that left it
-- entirely are unlinked (freed off the main thread), UNLINKS at a time.
-- Renewing the expiry touches the tail's segment only, once per 1/8 of the
-- retention: a segment gets its last expiry when the next one opens, and
-- one that expired before its calls were trimmed held none that counts
-- (see past_expired). Only a pool whose longest window grew renews every
-- segment, once.
--
-- Speed: this runs on Redis's one thread for every call of every client. The
-- common path makes four redis.calls (TIME, HMGET, RPUSH per pool, HSET),
-- reads the log only when an entry leaves a window (and then, in a busy
-- window, once per FRONT calls: front:pool:P), and packs each pool's
-- numbers into one field: converting numbers to and from text, and every
-- field, table and closure, costs more than the arithmetic (counted with
-- bench/script-instructions.sh).
--
-- Self-contained on purpose: Redis loads each script alone (EVALSHA has no
-- include), so the few lines that read the clock (TIME, or ARGV[1] in tests)
-- open charge.lua, block.lua and read.lua alike rather than a shared prelude.

local ENTRY, CHUNK, META = 4, 16, '<ddddd'
local BLOCK, SEG, RESEND, TRIM, UNLINKS, RESERVED = 128, 65536, 1024, 16384, 32, 1024
-- (the trim's count runs with the call that closes a block, which takes
-- the general path anyway: see the trim below)
local TRIM_EVERY = BLOCK
-- A window's front (see front:pool:P): FRONT calls, in a slot of SLOT bytes.
local FRONT = 32
-- (lua/settle.lua's: how far behind the newest call a settle changes a cost)
local REACH = 4096
local SLOT = 16 * (FRONT + 1)
local IXSEG, RECORD = SEG / BLOCK, '<ddddddd'
-- Exactness (issue 23): a double counts by ones up to 2^53, so no stored
-- sum (a window's, a block's, the index's running totals) may pass EXACT.
-- An allowed charge fits every budget, and no budget passes EXACT
-- (src/config/bounds.rs); a settle records at most the pool's largest
-- budget plus one (src/ledger/decision.rs). What is left is a window
-- filled past every budget by observe mode, or settles above their
-- estimates, 2^53 units in all: the pool then counts as lost (spent until
-- its longest window has passed, its log started afresh) rather than
-- rounded; an index record whose totals would pass EXACT is not kept (the
-- log is read instead) or starts a new origin.
local EXACT = 2 ^ 53 - 1
-- The packing of a pool's state with m windows ('<ddddddddd' for one).
local function layout(m)
  return m == 1 and '<dddddddddddd' or '<' .. string.rep('d', 8 + 4 * m)
end

-- The common charge, fast (issue 14, part 5): a charge that the general
-- path below would admit with no step but sliding its windows a call or
-- two, logging the call and saving the state, made here in straight-line
-- code, without the dozens of functions and tables the general path
-- builds on every call. Anything else (a flag, a pool seen for the first
-- time or whose windows changed, a calendar window, a loss, a block,
-- others' units, an expiry to renew, a segment or block to open or close,
-- a trim due, a call that does not fit) returns nil before any write, and
-- the general path decides, from the same reads. The two must decide
-- alike: the conformance and equivalence suites run every charge through
-- whichever applies.
--
-- A function of its arguments, Redis's globals and the constants above
-- only: a closure that captured the prelude's locals below would cost a
-- tenth of the charge to make, on every call.
local function fast_charge(v, now, now_text, npools, horizon, visible, expires, serial)
  local KEYS, ARGV, call = KEYS, ARGV, redis.call
  local spack, sunpack, floor, min, max = struct.pack, struct.unpack, math.floor, math.min, math.max
  if not v[1] or #v[1] ~= 40 or not v[3] then return end
  -- (each pool's state, pv, holds past its packed fields its cost and
  -- then its windows' budgets, parsed once; fronts: those read to be
  -- kept, by pool, made when one is)
  local pvs, a, longest, fronts = {}, 8 + npools, horizon, nil
  for p = 1, npools do
    local packed, m, cost = v[3 + p], ARGV[a + 1] + 0, ARGV[a] + 0
    if not packed or #packed ~= 8 * (8 + 4 * m) then return end
    local pv = { sunpack(layout(m), packed) }
    if pv[3] ~= m or pv[5 + 4 * m] ~= 0 or pv[8 + 4 * m] > now then return end
    pv[9 + 4 * m] = cost
    for w = 1, m do
      local len, budget = ARGV[a + 2 * w] + 0, ARGV[a + 2 * w + 1] + 0
      if len <= 0 or pv[4 * w] ~= len or cost > budget then return end
      if len > longest then longest = len end
      pv[9 + 4 * m + w] = budget
    end
    pvs[p], a = pv, a + 2 + 2 * m
  end
  local retain = max(visible, longest)
  local keep = retain + 60000000
  -- (renewing any expiry is the general path's)
  if expires == nil or expires < now + keep then return end
  a = 8 + npools
  for p = 1, npools do
    local pv, m = pvs[p], pvs[p][3]
    local cost = pv[9 + 4 * m]
    local tail = pv[2]
    if pv[4 + 4 * m] < now + keep or pv[4 + 4 * m] > expires then return end
    -- (a list made, as a segment opens or an empty log restarts, or a
    -- block closed by this call: the general path's)
    if tail % SEG == 0 or tail == pv[1] or (tail + 1) % BLOCK == 0 then return end
    local dead_cut = max(now - visible, pv[6 + 4 * m])
    local front = v[3 + npools + p]
    if front and #front ~= m * SLOT then front = nil end
    local oldest, lw, lwlen = nil, 1, 0
    for w = 1, m do
      local b, len = 4 * w, pv[4 * w]
      if len > lwlen then lw, lwlen = w, len end
      local cutoff = max(now - len, dead_cut)
      -- Slide, through the calls kept at the window's front, read from
      -- the log when it has none: FRONT calls, kept, where no settle can
      -- reach them any more (a settle changes the cost of a call at most
      -- REACH behind the newest, see lua/settle.lua), else two, as many as
      -- a busy window sheds, used by this call only. Two reads at most;
      -- more leaving: the general path, which passes whole blocks.
      local at, c0, cn, reads = (w - 1) * SLOT, 0, 0, 0
      local view, off = front, at -- (where calls [c0, c0 + cn) are packed)
      if front then c0, cn = sunpack('<dd', front, at + 1) end
      while pv[b + 2] < tail and (pv[b + 3] == 0 or pv[b + 3] <= cutoff) do
        local ptr = pv[b + 2]
        if ptr < c0 or ptr >= c0 + cn then
          if reads == 2 then return end
          reads = reads + 1
          local k = floor(ptr / SEG)
          local start, keep = max(pv[1], k * SEG), ptr + FRONT + REACH < tail
          local to = min(tail, ptr + (keep and FRONT or 2), (k + 1) * SEG)
          local e = call('LRANGE', KEYS[1 + p] .. ':' .. k, (ptr - start) * ENTRY, (to - start) * ENTRY - 1)
          if #e ~= (to - ptr) * ENTRY then return end
          local x = { ptr, to - ptr }
          for j = 1, #e, ENTRY do x[#x + 1], x[#x + 2] = e[j] + 0, e[j + 1] + 0 end
          view, off, c0, cn = spack('<' .. string.rep('d', #x), unpack(x)), 0, ptr, to - ptr
          if keep then
            front = front or string.rep('\0', m * SLOT)
            front = string.sub(front, 1, at) .. view .. string.rep('\0', SLOT - #view) .. string.sub(front, at + SLOT + 1)
            fronts = fronts or {}
            view, off, fronts[p] = front, at, front
          end
        end
        local t, c = sunpack('<dd', view, off + 17 + 16 * (ptr - c0))
        if t > cutoff then
          pv[b + 3] = t
        else
          pv[b + 1], pv[b + 2], pv[b + 3] = pv[b + 1] - c, ptr + 1, 0
        end
      end
      if pv[b + 1] + cost > pv[9 + 4 * m + w] then return end
      if now - len <= dead_cut then oldest = pv[b + 2] end
    end
    -- (a trim due: the general path's)
    if oldest and oldest > pv[1] then return end
    if not oldest and ((tail + 1) % TRIM_EVERY == 0 or pv[4 * lw + 2] >= tail) then return end
    pv[6 + 4 * m] = dead_cut
    a = a + 2 + 2 * m
  end
  -- Record the call once per pool, and save.
  serial = serial + 1
  local u, reply, r = {}, { 1, now, serial, 0 }, 4
  a = 8 + npools
  for p = 1, npools do
    local pv = pvs[p]
    local m = pv[3]
    local cost = pv[9 + 4 * m]
    local k = floor(pv[2] / SEG)
    local len = call('RPUSH', KEYS[1 + p] .. ':' .. k, now_text, ARGV[a], v[3], ARGV[2])
    pv[2] = pv[2] + 1
    for w = 1, m do
      local b = 4 * w
      if pv[b + 2] == pv[2] - 1 then pv[b + 3] = now end -- the window was empty
      pv[b + 1] = pv[b + 1] + cost
    end
    if len ~= (pv[2] - max(pv[1], k * SEG)) * ENTRY then
      -- The log is not what the state says (as in the general path's
      -- record): started afresh, counted as spent for a while.
      call('UNLINK', KEYS[1 + p] .. ':' .. k, KEYS[1 + npools + p] .. ':' .. k)
      u[#u + 1], u[#u + 2] = ARGV[7 + p], spack(layout(0), pv[2], pv[2], 0, pv[4 + 4 * m], now, pv[6 + 4 * m],
        pv[7 + 4 * m], pv[8 + 4 * m])
      fronts = fronts or {}
      fronts[p] = ''
    else
      u[#u + 1], u[#u + 2] = ARGV[7 + p], spack(layout(m), unpack(pv, 1, 8 + 4 * m))
    end
    if fronts and fronts[p] then u[#u + 1], u[#u + 2] = 'front:' .. ARGV[7 + p], fronts[p] end
    for w = 1, m do reply[r + w] = pv[9 + 4 * m + w] - pv[4 * w + 1] end
    r, a = r + m, a + 2 + 2 * m
  end
  call('HSET', KEYS[1], 'meta', spack(META, now, serial, retain, expires, 0), unpack(u))
  for p = 1, npools do reply[r + p] = pvs[p][2] - 1 end
  reply[r + npools + 1], reply[r + npools + 2], reply[r + npools + 3] = 0, 0, 0
  -- (no others' units on this path: see the general path's reply)
  for p = 1, npools do reply[r + npools + 2 + 2 * p], reply[r + npools + 3 + 2 * p] = 0, 1 end
  return reply
end
local KEYS, ARGV, call, tonumber = KEYS, ARGV, redis.call, tonumber
local spack, sunpack, floor, min, max = struct.pack, struct.unpack, math.floor, math.min, math.max
local state = KEYS[1]

-- now as a number, and as the text the log stores (made once: Redis turns a
-- Lua number into text with a slow %.17g on every redis.call)
-- (Text turns into a number by arithmetic, `s + 0`: tonumber(s) parses
-- it twice, and parsing is most of what a charge costs in Lua.)
local now, now_text
if ARGV[1] == '' then
  local t = call('TIME')
  local us = t[2]
  now = t[1] * 1000000 + us
  if #us < 6 then us = string.rep('0', 6 - #us) .. us end
  now_text = t[1] .. us
else
  now, now_text = ARGV[1] + 0, ARGV[1]
end
local flag = ARGV[3] == '0' and 0 or tonumber(ARGV[3]) or 0
local id, resend, horizon = ARGV[2], flag % 2 == 1, ARGV[4] + 0
local force, reserve = floor(flag / 4) % 2 == 1, flag >= 8
local tag_field, min_serial, npools = ARGV[5], ARGV[6] + 0, ARGV[7] + 0

-- (then each pool's state field, then its front, for the fast path; one
-- pool, the common charge, without a table)
local v
if npools == 1 then
  v = call('HMGET', state, 'meta', 'blocked_until', tag_field, ARGV[8], 'front:' .. ARGV[8])
else
  local fields = { 'meta', 'blocked_until', tag_field }
  for p = 1, npools do fields[3 + p], fields[3 + npools + p] = ARGV[7 + p], 'front:' .. ARGV[7 + p] end
  v = call('HMGET', state, unpack(fields))
end
local last, serial, stored_retain, expires, lost_all = 0, 0, 0, nil, 0
if v[1] and #v[1] == 32 then -- (a build before the loss time: four fields)
  last, serial, stored_retain, expires = sunpack('<dddd', v[1])
elseif v[1] then
  last, serial, stored_retain, expires, lost_all = sunpack(META, v[1])
end
-- Keys written by a build before 2026-11-22 (log triples, a 'serial' field)
-- would be misread: refuse them before writing anything.
if not v[1] and call('HEXISTS', state, 'serial') == 1 then return redis.error_reply('OLDER_LAYOUT keys written by an older build') end
local blocked_until = v[2] and tonumber(v[2]) or 0
if now < last then now, now_text = last, string.format('%d', last) end
-- The caller saw more charges than the store holds: the log was lost.
local visible = max(stored_retain, horizon) -- R, above
-- A loss older than R is over for every window charged so far: forget it,
-- so that a window lengthened later does not bring it back.
if lost_all > 0 and lost_all + visible <= now then lost_all = 0 end
if serial < min_serial then lost_all = now end

local fast = flag == 0 and lost_all == 0 and blocked_until <= now
  and fast_charge(v, now, now_text, npools, horizon, visible, expires, serial)
if fast then return fast end

-- (observe mode: the pool, window and retry of what would have refused it)
local observed = { 0, 0, 0 }

-- A pool's state (pool:P unpacked, in its array part) with every named
-- field this script sets made at once: a table grown field by field is
-- rehashed at every power of two.
local function pool_state(...)
  return {
    expires = 0, lost = 0, dead = 0, others = 0, others_until = 0, lost_any = 0, longest = 0,
    dead_cut = 0, lw = 1, extra = 0, renew_all = false, rebuild = false, ix = false, held = false, ...
  }
end

-- The keys of segment k of pool p's log and of its index.
local function log_seg(p, k) return KEYS[1 + p] .. ':' .. k end
local function ix_seg(p, k) return KEYS[1 + npools + p] .. ':' .. k end

-- Calls [from, to) of pool p's log (state pv), within one segment: flat
-- quadruples.
local function calls(p, pv, from, to)
  local k = floor(from / SEG)
  local start = max(pv[1], k * SEG)
  return call('LRANGE', log_seg(p, k), (from - start) * ENTRY, (to - start) * ENTRY - 1)
end

-- Calls [from, to) of pool p's log, at most n (or CHUNK) of them and never
-- past the end of from's block.
local function chunk(p, pv, from, to, n)
  return calls(p, pv, from, min(to, from + (n or CHUNK), (floor(from / BLOCK) + 1) * BLOCK))
end

-- Whether pool p's log holds calls [head, tail), as far as the lengths of
-- its first and last segments tell.
local function intact(p, head, tail)
  if tail <= head then return true end
  local kh, kt = floor(head / SEG), floor((tail - 1) / SEG)
  if call('LLEN', log_seg(p, kh)) ~= (min(tail, (kh + 1) * SEG) - head) * ENTRY then return false end
  return kt == kh or call('LLEN', log_seg(p, kt)) == (tail - kt * SEG) * ENTRY
end

-- Pool p's index as this call sees it: the last complete block, and the
-- length of each index segment read so far.
local function index_of(pv)
  if not pv.ix then pv.ix = { top = floor(pv[2] / BLOCK) - 1, len = {} } end
  return pv.ix
end

-- Block b's record: first and last call's time, cumulative cost through the
-- block, the block's cost, calls, the block's number, its origin; nothing
-- when the index has no record of b.
local function record_of(p, pv, b)
  local ix = index_of(pv)
  if b > ix.top or b < 0 then return end
  local k = floor(b / IXSEG)
  local n = ix.len[k]
  if not n then
    n = call('LLEN', ix_seg(p, k))
    ix.len[k] = n
  end
  local pos = b - (min(ix.top, (k + 1) * IXSEG - 1) - n + 1)
  if pos < 0 then return end
  local r = call('LINDEX', ix_seg(p, k), pos)
  if not r then return end
  local first, last, cum, cost, calls_n, block, origin = sunpack(RECORD, r)
  if block ~= b then return end
  return first, last, cum, cost, calls_n, block, origin
end

-- The first block in [lo, hi] whose record satisfies ok, or hi + 1 (ok must
-- hold for every block after one where it holds); nil when a record it
-- looks at is missing or counts from another origin than o.
local function search(p, pv, lo, hi, o, ok)
  hi = hi + 1
  while lo < hi do
    local mid = floor((lo + hi) / 2)
    local r = { record_of(p, pv, mid) }
    if r[7] ~= o then return end
    if ok(unpack(r)) then hi = mid else lo = mid + 1 end
  end
  return lo
end

-- The cumulative cost through block b, if its record counts from origin o.
local function through(p, pv, b, o)
  local _, _, cum, _, _, _, origin = record_of(p, pv, b)
  if origin == o then return cum end
end

-- Slide window b of pool p (state pv, see pool:P above) over its log: drop
-- from its sum the calls at or before cutoff, passing whole blocks that
-- left through the index. False when the log is shorter than the state says.
local function slide(p, pv, b, cutoff)
  local n = 2
  while pv[b + 2] < pv[2] and (pv[b + 3] == 0 or pv[b + 3] <= cutoff) do
    local ptr = pv[b + 2]
    if ptr % BLOCK == 0 then
      local a = ptr / BLOCK
      local _, last, cum, cost, _, _, o = record_of(p, pv, a)
      if last and last <= cutoff then
        -- Block a left whole: so did every block up to the first that did not.
        local j = search(p, pv, a + 1, index_of(pv).top, o, function(_, l) return l > cutoff end)
        local upto = j and through(p, pv, j - 1, o)
        if upto then
          pv[b + 1] = pv[b + 1] - (upto - (cum - cost))
          pv[b + 2], pv[b + 3], ptr = j * BLOCK, 0, j * BLOCK
        end
      end
    end
    if ptr < pv[2] then
      -- (a busy window sheds a call or two a charge: read two, then more)
      local e = chunk(p, pv, ptr, pv[2], n)
      n = CHUNK
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
  end
  return true
end

-- The total cost of pool p's calls [from, to), whole blocks through the
-- index; and false when the log is shorter than the state says.
local function cost_between(p, pv, from, to)
  local total = 0
  while from < to do
    local a, z = from / BLOCK, min(index_of(pv).top, floor(to / BLOCK) - 1)
    local _, cum, cost, o, upto
    if from % BLOCK == 0 and z >= a then
      _, _, cum, cost, _, _, o = record_of(p, pv, a)
      upto = o and through(p, pv, z, o)
    end
    if upto then
      total, from = total + upto - (cum - cost), (z + 1) * BLOCK
    else
      local e = chunk(p, pv, from, to)
      if #e == 0 then return total, false end
      for j = 2, #e, ENTRY do total = total + tonumber(e[j]) end
      from = from + #e / ENTRY
    end
  end
  return total, true
end

-- When `need` units of window b of pool p (state pv) will have left it: when
-- the newest of the oldest calls that hold them leaves; nil when the log is
-- shorter than the state says.
local function freed_at(p, pv, b, need)
  local freed, ptr, walk_to = 0, pv[b + 2], pv[b + 2]
  while ptr < pv[2] do
    if ptr % BLOCK == 0 and ptr >= walk_to then
      local a = ptr / BLOCK
      local _, _, cum, cost, _, _, o = record_of(p, pv, a)
      if cum then
        -- (the cumulative cost before the window's oldest call)
        local base = cum - cost - freed
        local j = search(p, pv, a, index_of(pv).top, o, function(_, _, c) return c - base >= need end)
        local upto = j and j > a and through(p, pv, j - 1, o)
        if upto then freed, ptr = upto - base, j * BLOCK end
        walk_to = ptr + BLOCK -- (block j holds the call that frees enough)
      end
    end
    if ptr < pv[2] then
      local e = chunk(p, pv, ptr, pv[2])
      if #e == 0 then return nil end
      for j = 1, #e, ENTRY do
        freed = freed + tonumber(e[j + 1])
        if freed >= need then return tonumber(e[j]) + pv[b] end
      end
      ptr = ptr + #e / ENTRY
    end
  end
  return now + pv[b]
end

-- Pool p's log holds nothing from call `at` on: its tail segment and index
-- segment are emptied, so that the next call is written at their start.
local function restart(p, at)
  call('UNLINK', log_seg(p, floor(at / SEG)), ix_seg(p, floor(at / SEG)))
end

-- Pool p's head, moved past the segments before its tail's that expired
-- (at most UNLINKS of them). A segment gets its last expiry when the next
-- one opens, keep past that one's first call, when the pool's longest
-- window was at most as long as now: so once it expired, that first call,
-- and every call of the segment with it, is at or before `cut`, the
-- earliest cutoff of the pool's windows. A segment missing while the next
-- one's first call still counts was lost, not expired: the head stays.
local function past_expired(p, head, tail, cut)
  local kt = floor((tail - 1) / SEG)
  for _ = 1, UNLINKS do
    local kh = floor(head / SEG)
    if kh >= kt or call('EXISTS', log_seg(p, kh)) == 1 then break end
    local first = tonumber(call('LINDEX', log_seg(p, kh + 1), 0))
    if not first or first > cut then break end
    call('UNLINK', ix_seg(p, kh))
    head = (kh + 1) * SEG
  end
  return head
end

-- A pool's log as a build before the segments kept it, in the list named by
-- the prefix itself: adopted as segment 0 (calls renumbered from 0) when it
-- holds what the state says and fits in one segment. True when adopted.
local function adopt(p, pv)
  local calls_n = pv[2] - pv[1]
  if calls_n > SEG or call('LLEN', KEYS[1 + p]) ~= calls_n * ENTRY or calls_n == 0 then return false end
  call('UNLINK', log_seg(p, 0), ix_seg(p, 0), KEYS[1 + npools + p])
  call('RENAME', KEYS[1 + p], log_seg(p, 0))
  local shift = pv[1]
  for w = 1, pv[3] do pv[4 * w + 2] = pv[4 * w + 2] - shift end
  pv[1], pv[2], pv.ix = 0, calls_n, nil
  return true
end

-- Each pool's state, brought up to now. A pool seen for the first time, or
-- whose windows changed, or whose state and log are out of step, is counted
-- afresh from its log.
-- Calendar windows: the period that holds now, [start, stop), among the
-- midnights at ARGV[from..], stepped by per from each and the day's last
-- running to the next midnight (as src/ledger/calendar.rs period_in).
local CAL, DAY = 6, 86400000000
local function period(from, per)
  for d = from, from + CAL - 2 do
    local day, next_day = tonumber(ARGV[d]), tonumber(ARGV[d + 1])
    if day <= now and now < next_day then
      local last = math.max(floor(DAY / per) - 1, 0)
      local k = math.min(floor((now - day) / per), last)
      local start = day + k * per
      return start, k == last and next_day or math.min(start + per, next_day)
    end
  end
end
local cal_at = 8 + npools -- (past every pool's layout: the midnights)
for _ = 1, npools do cal_at = cal_at + 2 + 2 * tonumber(ARGV[cal_at + 1]) end
local cal_end = cal_at -- (past the midnights: observe's or reserve's arguments)
-- Per pool, per calendar window: its period's {start, stop}.
local cals = {}

local pools, longest = {}, horizon
local a = 8 + npools -- where the pool's layout starts in ARGV
for p = 1, npools do
  local cost, m = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  local pv = v[3 + p]
  -- (unpacked as stored: the configuration may have changed its windows;
  -- builds before the dead mark stored one field fewer, before the per-pool
  -- expiry three fewer)
  if pv and pv ~= '' then
    local fields = #pv / 8
    if fields % 4 == 0 then
      pv = pool_state(sunpack(layout((fields - 8) / 4), pv))
    else
      pv = { sunpack('<' .. string.rep('d', fields), pv) }
      -- (3 + 4m fields before the per-pool expiry, 5 + 4m before the dead
      -- mark, 6 + 4m before the segments: missing ones are 0)
      for k = fields + 1, fields + ({ [1] = 1, [2] = 0, [3] = 3 })[fields % 4] do pv[k] = 0 end
    end
    -- (the expiry, loss time and dead mark, moved past any window count)
    local stored_m = pv[3]
    pv.expires, pv.lost, pv.dead = pv[4 + 4 * stored_m], pv[5 + 4 * stored_m], pv[6 + 4 * stored_m]
    pv.others, pv.others_until = 0, 0
    if fields % 4 == 0 then
      pv.others, pv.others_until = pv[7 + 4 * stored_m], pv[8 + 4 * stored_m]
    else
      -- A build before the segments kept the log in one list (see adopt).
      adopt(p, pv)
    end
  else
    pv = nil
  end
  local fresh = not pv or pv[3] ~= m
  -- (the stored windows' longest reach: a pool whose longest grew renews
  -- every segment's expiry, made for the shorter)
  local plong_was = 0
  for w = 1, pv and pv[3] or 0 do
    local len = pv[4 * w]
    if len < 0 then len = -len + 3600000000 end
    if len > plong_was then plong_was = len end
  end
  local plong, lw = 0, 1
  cals[p] = {}
  for w = 1, m do
    local len, budget = tonumber(ARGV[a + 2 * w]), tonumber(ARGV[a + 2 * w + 1])
    if cost > budget then return redis.error_reply('COST_EXCEEDS_BUDGET pool ' .. p) end
    -- (how long an entry counts: a calendar period can run an hour long)
    local reach = len
    if len < 0 then
      local start, stop = period(cal_end, -len)
      if not start then return redis.error_reply('CLOCK_SKEW the store clock is days from the caller\'s') end
      cals[p][w], cal_end, reach = { start, stop }, cal_end + CAL, -len + 3600000000
    end
    if reach > longest then longest = reach end
    if reach > plong then plong, lw = reach, w end
    if not fresh and pv[4 * w] ~= len then fresh = true end
  end
  -- (the pool's own loss is stored with it; a loss of the whole log, in meta)
  local expires_p, lost_p, dead_p = pv and pv.expires or 0, pv and pv.lost or 0, pv and pv.dead or 0
  local others_p, others_until_p = pv and pv.others or 0, pv and pv.others_until or 0
  -- A log past its expiry held only calls that count in no window: it
  -- starts afresh at its tail (its keys may not be gone yet).
  if pv and expires_p > 0 and now >= expires_p and pv[2] > pv[1] then
    restart(p, pv[2])
    pv[1], fresh = pv[2], true
  end
  -- (no window reaches back past the retention, nor past the dead mark;
  -- a calendar window counts its period's entries only)
  local dead_cut = max(now - visible, dead_p)
  local cuts, cut_min, own = {}, now, nil
  for w = 1, m do
    local cal = cals[p][w]
    local start = cal and cal[1] - 1 or now - tonumber(ARGV[a + 2 * w])
    cuts[w] = max(start, dead_cut)
    if cuts[w] < cut_min then cut_min = cuts[w] end
    -- (a window longer than the retention, cut by the retention's cutoff
    -- only, for this decision: see save_slid)
    if cuts[w] > max(start, dead_p) then own = own or {}; own[w] = true end
  end
  local held = nil
  for attempt = 1, 2 do
    if fresh then
      local head, tail, skipped = 0, 0, false
      if pv then
        head, tail = past_expired(p, pv[1], pv[2], cut_min), pv[2]
        skipped = head > pv[1]
      elseif call('EXISTS', log_seg(p, 0)) == 1 then
        -- No state, but a log: the state was lost alone (evicted). Where
        -- the log's live calls are is unknown: start afresh, counted as
        -- spent for a while.
        restart(p, 0)
        lost_p = now
      end
      -- (on the second attempt the slide found calls missing)
      local gone = pv and ((attempt == 2 and not skipped) or not intact(p, head, tail))
      if gone then
        -- The log is not what the state says: it vanished (evicted, or a
        -- Redis without persistence restarted). Start it afresh, and count
        -- the pool as spent for a while.
        restart(p, tail)
        head, lost_p = tail, now
      end
      pv = pool_state(head, tail, m)
      local total = cost_between(p, pv, head, tail)
      for w = 1, m do
        local b = 4 * w
        pv[b], pv[b + 1], pv[b + 2], pv[b + 3] = tonumber(ARGV[a + 2 * w]), total, head, 0
      end
    end
    if own then
      held = {}
      for w in pairs(own) do held[w] = { pv[4 * w + 1], pv[4 * w + 2], pv[4 * w + 3] } end
    end
    local ok = true
    for w = 1, m do ok = slide(p, pv, 4 * w, cuts[w]) and ok end
    if ok or fresh then break end
    -- The log is shorter than the state says: count afresh (above).
    fresh = true
  end
  -- A loss is over once the pool's longest window has passed since (or
  -- R, the longest of every window charged before).
  if lost_p > 0 and (lost_p + plong <= now or lost_p + visible <= now) then lost_p = 0 end
  local lost_any = max(lost_p, lost_all)
  if lost_any + plong <= now then lost_any = 0 end
  pv.expires, pv.lost, pv.lost_any, pv.longest = expires_p, lost_p, lost_any, plong
  pv.dead, pv.dead_cut, pv.held = dead_p, dead_cut, held or false
  pv.renew_all = plong > plong_was and plong_was > 0
  -- Others' units count in the longest window until the upstream's reset.
  pv.lw, pv.others, pv.others_until = lw, others_p, others_until_p
  pv.extra = others_until_p > now and others_p or 0
  pools[p] = pv
  a = a + 2 + 2 * m
end
local retain = max(visible, longest)
-- Every key lives until its newest entry counts in no window (and the block
-- is over), plus a minute. Renewed 1/8 window ahead, so not on every call.
local keep = retain + 60000000
if blocked_until - now + 60000000 > keep then keep = blocked_until - now + 60000000 end
-- (and others' units, until the upstream's reset)
for p = 1, npools do
  if pools[p].others_until - now + 60000000 > keep then keep = pools[p].others_until - now + 60000000 end
end
local renew_to = now + keep + floor(retain / 8)

-- The units left in every window, in ARGV order, after the fields of reply;
-- then each pool's entry's call number (none: -1).
local function remaining(reply, logged)
  local r, a = #reply, 8 + npools
  for p = 1, npools do
    local pv = pools[p]
    for w = 1, pv[3] do
      reply[r + w] = tonumber(ARGV[a + 2 * w + 1]) - pv[4 * w + 1] - (w == pv.lw and pv.extra or 0)
    end
    r, a = r + pv[3], a + 2 + 2 * pv[3]
  end
  for p = 1, npools do reply[r + p] = logged and pools[p][2] - 1 or -1 end
  for k = 1, 3 do reply[r + npools + k] = observed[k] end
  for p = 1, npools do
    reply[r + npools + 2 + 2 * p], reply[r + npools + 3 + 2 * p] = pools[p].extra, pools[p].lw
  end
  return reply
end

-- Renew the expiry of pool p's log and index, to pv.expires: their tail's
-- segments, or with `all` every segment that still holds calls.
local function renew(p, pv, all)
  local ms, kt = floor((pv.expires - now) / 1000), floor((pv[2] - 1) / SEG)
  for k = all and floor(pv[1] / SEG) or kt, kt do
    call('PEXPIRE', log_seg(p, k), ms)
    call('PEXPIRE', ix_seg(p, k), ms)
  end
end

-- The HSET arguments that save every pool's state, then any given after.
local u, n = {}, 0
local function save_pools()
  for p = 1, npools do
    local pv = pools[p]
    local m = pv[3]
    if pv.renew_all and not pv.rebuild then
      -- (a pool whose longest window grew: every segment, once)
      pv.expires = max(pv.expires, renew_to)
      renew(p, pv, true)
    end
    pv[4 + 4 * m], pv[5 + 4 * m], pv[6 + 4 * m] = pv.expires, pv.lost, pv.dead
    -- (the general path keeps no front: the next fast charge reads it anew)
    u[n + 3], u[n + 4] = 'front:' .. ARGV[7 + p], ''
    u[n + 1] = ARGV[7 + p]
    if pv.rebuild then
      -- (a pool out of step with its log starts it afresh and keeps no
      -- windows: the next call counts them afresh)
      restart(p, pv[2])
      u[n + 2] = spack(layout(0), pv[2], pv[2], 0, pv.expires, pv.lost, pv.dead, pv.others, pv.others_until)
    else
      pv[7 + 4 * m], pv[8 + 4 * m] = pv.others, pv.others_until
      u[n + 2] = spack(layout(m), unpack(pv, 1, 8 + 4 * m))
    end
    n = n + 4
  end
end

-- Save every pool's state and meta (with retain r), renewing the state's
-- expiry when it no longer covers keep or any log's: the state outlives
-- every log, and a state made or kept here expires like any other.
local function save_state(r)
  save_pools()
  local refresh = expires == nil or expires < now + keep
  for p = 1, npools do
    if pools[p].expires > (expires or 0) then refresh = true end
  end
  if refresh then expires = renew_to end
  call('HSET', state, 'meta', spack(META, now, serial, r, expires, lost_all), unpack(u, 1, n))
  if refresh then call('PEXPIRE', state, floor((expires - now) / 1000)) end
end

-- Save the slid windows and the decision's time, which later decisions
-- never go below, without recording anything. A window slid past its own
-- start and the pool's dead mark, by the retention's cutoff alone (a
-- window lengthened beyond the retention), keeps its place: the calls
-- between count in no window of this decision, yet only a recorded call
-- moves the dead mark, and a retention lengthened before the pool's next
-- one brings them back, as the embedded store and read.lua count them.
-- (saved so, then slid back: this decision's reply counts as slid)
local function save_slid()
  local function swap()
    for p = 1, npools do
      local pv = pools[p]
      for w, h in pairs(pv.held or {}) do
        local b = 4 * w
        pv[b + 1], pv[b + 2], pv[b + 3], h[1], h[2], h[3] = h[1], h[2], h[3], pv[b + 1], pv[b + 2], pv[b + 3]
      end
    end
  end
  swap()
  save_state(stored_retain)
  swap()
end

-- A resent charge already in the log (of its first pool, among its last
-- RESEND calls) is answered as it was, and not recorded again. Only
-- resends pay for the search.
if resend then
  local pv, found, done = pools[1], false, false
  local from, stop = pv[2], max(pv[1], pv[2] - RESEND)
  while not (found or done) and from > stop do
    local lo = max(stop, floor((from - 1) / BLOCK) * BLOCK)
    local e = calls(1, pv, lo, from)
    from, done = lo, #e == 0
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
    return remaining({ 1, now, serial, 1 }, false)
  end
end

-- Observe: the upstream says `rem` units of its `limit` are left in the
-- pool: what it counts beyond the ledger's own usage (in the pool's longest
-- window, slid to now above) was spent by others, and counts as such until
-- the upstream's count resets. Never less than the ledger's own count.
if flag == 2 then
  local pv, rest = pools[1], cal_end
  local rem, limit = tonumber(ARGV[rest]), tonumber(ARGV[rest + 1])
  local at, after = tonumber(ARGV[rest + 2]), tonumber(ARGV[rest + 3])
  local others = limit - pv[4 * pv.lw + 1] - rem
  if others > 0 then
    pv.others = others
    pv.others_until = at > 0 and at or now + (after >= 0 and after or pv.longest)
  else
    pv.others, pv.others_until = 0, 0
  end
  -- (the state lives at least until others' units leave)
  if pv.others_until - now + 60000000 > keep then
    keep = pv.others_until - now + 60000000
    renew_to = now + keep + floor(retain / 8)
  end
  save_slid()
  return { 4, now, serial, pv.others, pv.others_until }
end

if blocked_until > now then
  return { 2, now, serial, blocked_until, call('HGET', state, 'blocked_reason') or '' }
end

-- A pool whose log was lost counts as spent until its longest window passed.
for p = 1, npools do
  local pv = pools[p]
  if pv.lost_any > 0 and force then
    if observed[1] == 0 then observed = { p, 0, pv.lost_any + pv.longest - now } end
  elseif pv.lost_any > 0 then
    save_slid()
    return { 3, now, serial, p, pv.lost_any, pv.lost_any + pv.longest }
  end
end

-- Does the call fit every window? If not, it fits again at the latest of the
-- times at which each short window has shed enough units.
local worst_p, worst_w, worst_retry
local lost_short = false -- (observe mode: a log found shorter than its state)
a = 8 + npools
for p = 1, npools do
  local pv = pools[p]
  for w = 1, pv[3] do
    local b = 4 * w
    local extra = w == pv.lw and pv.extra or 0
    local need = pv[b + 1] + extra + tonumber(ARGV[a]) - tonumber(ARGV[a + 2 * w + 1])
    local cal = cals[p][w]
    if need > 0 and cal then
      -- A calendar window frees its units at once, when its period ends
      -- (or when others' units leave, if that is enough and sooner).
      local at = cal[2]
      if extra > 0 and need <= extra then at = math.min(at, math.max(now, pv.others_until)) end
      if worst_retry == nil or at - now > worst_retry then
        worst_p, worst_w, worst_retry = p, w, at - now
      end
    elseif need > 0 then
      local at = extra == 0 and freed_at(p, pv, b, need)
      if extra > 0 then
        -- Others' units leave at once when the upstream resets; until
        -- then, the ledger's own calls must free all that is needed.
        local mine = need - extra
        at = now
        if mine > 0 then at = freed_at(p, pv, b, mine) end
        if at then at = math.max(at, pv.others_until) end
        if at and need <= pv[b + 1] then
          local sooner = freed_at(p, pv, b, need)
          if sooner == nil or sooner < at then at = sooner end
        end
      end
      if at == nil and force then
        -- (observe mode: a lost log is reported, and recorded through; no
        -- window of a log that is gone says anything)
        pv.lost, pv.rebuild = now, true
        observed, lost_short = { p, 0, pv.longest }, true
      elseif at == nil then
        -- The entries the state counts are gone: the log was lost.
        pv.lost, pv.rebuild = now, true
        save_slid()
        return { 3, now, serial, p, now, now + pv.longest }
      end
      local retry = at and at - now
      if retry and (worst_retry == nil or retry > worst_retry) then
        worst_p, worst_w, worst_retry = p, w, retry
      end
    end
  end
  a = a + 2 + 2 * pv[3]
end
if worst_retry ~= nil and force then
  if not lost_short then observed = { worst_p, worst_w, worst_retry } end
elseif worst_retry ~= nil then
  -- The slid sums are exact; keep them so the next call starts here.
  save_slid()
  return { 0, now, serial, worst_p, worst_w, worst_retry }
end
if observed[1] > 0 then
  -- Observe mode: counted, with its time, for status.
  local name = string.sub(ARGV[7 + observed[1]], 6)
  call('HINCRBY', state, 'observed:' .. name, 1)
  call('HSET', state, 'observed_at:' .. name, now_text)
end

-- Record the call once per pool and add its cost to every window.
local tag_id = v[3]
if not tag_id then
  tag_id = call('HINCRBY', state, 'tags', 1)
  u[1], u[2], u[3], u[4] = tag_field, tag_id, 'tagname:' .. tag_id, string.sub(tag_field, 5)
  n = 4
end
serial = serial + 1

-- Trim pool p (state pv) up to call `oldest`: whole segments before
-- oldest's are unlinked with their index, UNLINKS at a time; then at most
-- TRIM calls of the head's segment.
local function trim(p, pv, oldest)
  local kh, ko = floor(pv[1] / SEG), floor(oldest / SEG)
  if oldest >= pv[2] then ko = floor((pv[2] - 1) / SEG) + 1 end
  if ko > kh then
    local keys, upto = {}, min(ko, kh + UNLINKS)
    for k = kh, upto - 1 do
      keys[#keys + 1], keys[#keys + 2] = log_seg(p, k), ix_seg(p, k)
    end
    call('UNLINK', unpack(keys))
    pv[1] = min(pv[2], upto * SEG)
  end
  if oldest > pv[1] and floor(pv[1] / SEG) == ko then
    local to = min(oldest, pv[1] + TRIM)
    call('LTRIM', log_seg(p, ko), (to - pv[1]) * ENTRY, -1)
    pv[1] = to
  end
  pv.ix = nil
end

-- Calls at or before now - R (the retention stored before this call, at
-- least the horizon) count in no window, from now on even if R grows (the
-- dead mark): trim them, a bounded number at a time (the rest on later
-- calls), as the embedded store deletes them. The pointer of a window that
-- long already says how many; otherwise count them, once every TRIM_EVERY
-- calls (with the call that closes a block, which comes here anyway) or
-- when the longest window is empty (a read of the log on every call of a
-- busy pool costs more than the rest of the charge; calls not trimmed yet
-- are dead all the same).
for p = 1, npools do
  local pv = pools[p]
  local oldest
  for w = 1, pv[3] do
    if now - pv[4 * w] <= pv.dead_cut then oldest = pv[4 * w + 2] end
  end
  if oldest == nil and ((pv[2] + 1) % TRIM_EVERY == 0 or pv[4 * pv.lw + 2] >= pv[2]) then
    local b = 7 + 4 * pv[3] -- scratch space past the packed fields
    pv[b], pv[b + 1], pv[b + 2], pv[b + 3] = visible, 0, pv[1], 0
    if not slide(p, pv, b, pv.dead_cut) then
      -- (the head's segment expired before a trim reached it: passed when
      -- the next one's first call is dead too, see past_expired; else the
      -- head stays, and the pool is found lost where it matters)
      pv[b + 2] = past_expired(p, pv[1], pv[2], pv.dead_cut)
    end
    oldest = pv[b + 2]
  end
  pv.dead = pv.dead_cut
  if oldest and oldest > pv[1] then trim(p, pv, oldest) end
end

-- Append the record of pool p's block that the call just logged completed.
local function append_record(p, pv)
  local b = pv[2] / BLOCK - 1
  pv.ix = { top = b - 1, len = {} }
  local e = calls(p, pv, max(pv[1], b * BLOCK), pv[2])
  local cost, by_tag, tags = 0, {}, {}
  for j = 1, #e, ENTRY do
    local c, t = tonumber(e[j + 1]), e[j + 2]
    cost = cost + c
    if by_tag[t] then
      by_tag[t] = by_tag[t] + c
    else
      by_tag[t], tags[#tags + 1] = c, t
    end
  end
  local key = ix_seg(p, floor(b / IXSEG))
  -- (the predecessor's cumulative cost, or a new origin; a segment whose
  -- last record is not the predecessor's starts again, so that positions
  -- stay those of consecutive blocks)
  -- (a block of more than EXACT units: no record, the log is read instead)
  if cost > EXACT then
    pv.ix = nil
    return
  end
  local cum, origin = cost, b
  local _, _, pcum, _, _, _, porigin = record_of(p, pv, b - 1)
  if b % IXSEG == 0 or not pcum then call('UNLINK', key) end
  -- (a running total that would pass EXACT starts a new origin)
  if pcum and pcum + cost <= EXACT then cum, origin = pcum + cost, porigin end
  local r = { spack(RECORD, tonumber(e[1]), tonumber(e[#e - 3]), cum, cost, #e / ENTRY, b, origin) }
  for j, t in ipairs(tags) do r[j + 1] = spack('<dd', tonumber(t), by_tag[t]) end
  if call('RPUSH', key, table.concat(r)) == 1 then
    call('PEXPIRE', key, floor((pv.expires - now) / 1000))
  end
  pv.ix = nil
end

-- Add call s of pool p (state pv) at now, of `cost` units, to the pool's
-- reservations, dropping those at or before its retention's cutoff (they
-- count in no window) and all but the RESERVED newest.
local function add_reservation(p, pv, s, cost)
  local field = 'reserved:' .. string.sub(ARGV[7 + p], 6)
  local held = call('HGET', state, field) or ''
  local from = max(1, #held - 24 * (RESERVED - 1) + 1)
  while from <= #held and sunpack('<d', held, from + 8) <= pv.dead_cut do from = from + 24 end
  u[n + 1], u[n + 2] = field, string.sub(held, from) .. spack('<ddd', s, now, cost)
  n = n + 2
end
local reserved = reserve and ARGV[cal_end] or ''

-- Record the call once per pool and add its cost to every window.
a = 8 + npools
for p = 1, npools do
  local pv, cost = pools[p], tonumber(ARGV[a])
  -- (observe mode: a window that would pass EXACT counts as lost, above)
  for w = 1, pv[3] do
    if pv[4 * w + 1] + cost > EXACT then pv.lost, pv.rebuild = now, true end
  end
  local len = call('RPUSH', log_seg(p, floor(pv[2] / SEG)), now_text, ARGV[a], tag_id, id)
  pv[2] = pv[2] + 1
  if len ~= (pv[2] - max(pv[1], floor((pv[2] - 1) / SEG) * SEG)) * ENTRY then
    -- The log is not what the state says (a key expired or was evicted
    -- since the slide above): count it afresh, and as spent for a while.
    pv.lost, pv.rebuild = now, true
  end
  -- Each log (and its index) keeps its own expiry, renewed when it no
  -- longer covers keep. A call that opens a segment gives it that expiry,
  -- and the segment before its last (see past_expired).
  if pv.expires < now + keep or pv.renew_all then
    pv.expires = max(pv.expires, renew_to)
    renew(p, pv, pv.renew_all)
    pv.renew_all = nil
  end
  if len == ENTRY then
    local k, ms = floor((pv[2] - 1) / SEG), floor((pv.expires - now) / 1000)
    call('PEXPIRE', log_seg(p, k), ms)
    if k > floor(pv[1] / SEG) then
      call('PEXPIRE', log_seg(p, k - 1), ms)
      call('PEXPIRE', ix_seg(p, k - 1), ms)
    end
  end
  if pv[2] % BLOCK == 0 and not pv.rebuild then append_record(p, pv) end
  if string.sub(reserved, p, p) == '1' then add_reservation(p, pv, pv[2] - 1, cost) end
  for w = 1, pv[3] do
    local b = 4 * w
    if pv[b + 2] == pv[2] - 1 then pv[b + 3] = now end -- the window was empty
    pv[b + 1] = pv[b + 1] + cost
  end
  a = a + 2 + 2 * pv[3]
end

save_state(retain)

return remaining({ 1, now, serial, 0 }, true)
