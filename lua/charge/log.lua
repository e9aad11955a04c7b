-- charge/log.lua: reading pool p's log (state pv) and its index, for the
-- general path: calls by number, whether the log holds what the state says,
-- block records and the binary search over them, a window's slide, the
-- cost between two calls, when units free up; and a log started afresh, or
-- passed where its segments expired.

-- Calls [from, to) of pool p's log (state pv), within one segment: flat
-- quadruples.
local function calls(p, pv, from, to)
  local k = floor(from / SEG)
  local start = max(pv[$HEAD], k * SEG)
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
  if not pv.ix then pv.ix = { top = floor(pv[$TAIL] / BLOCK) - 1, len = {} } end
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

-- Window b of pool p (state pv) counted afresh from call `from` (at the
-- start of the tail's block), every call before it having left: its calls
-- after cutoff, their sum and the oldest one's time. False when the log is
-- shorter than the state says.
local function recount(p, pv, b, from, cutoff)
  local e = from < pv[$TAIL] and calls(p, pv, from, pv[$TAIL]) or {}
  if #e ~= (pv[$TAIL] - from) * ENTRY then return false end
  local sum, ptr, oldest = 0, pv[$TAIL], 0
  for j = #e - ENTRY + 1, 1, -ENTRY do
    local t = tonumber(e[j])
    if t <= cutoff then break end
    sum, ptr, oldest = sum + tonumber(e[j + 1]), ptr - 1, t
  end
  pv[b + $SUM], pv[b + $PTR], pv[b + $OLDEST] = sum, ptr, oldest
  return true
end

-- Slide window b of pool p (state pv, see pool:P above) over its log: drop
-- from its sum the calls at or before cutoff, passing whole blocks that
-- left through the index. False when the log is shorter than the state says.
-- What a slide costs is mostly the calls it reads (a few thousand
-- instructions each: the reply made, parsed into Lua strings, collected)
-- and its redis.calls, so a window that sheds more than its first two
-- calls, or a whole block, looks at the last complete block first: when it
-- left whole, so did every call before the tail's block, and the window is
-- counted afresh from that block, read once, instead of read up to it (a
-- pool idle since its calls left: the scale benchmark's "charge, all
-- left", which a charge as a share pays once per log it charges or reads).
-- Reads then grow 2, 8, 32, 128 calls within a block.
local function slide(p, pv, b, cutoff)
  local n = 2
  while pv[b + $PTR] < pv[$TAIL] and (pv[b + $OLDEST] == 0 or pv[b + $OLDEST] <= cutoff) do
    local top = index_of(pv).top
    if n == 8 and pv[b + $PTR] < (top + 1) * BLOCK then
      local _, last = record_of(p, pv, top)
      if last and last <= cutoff then return recount(p, pv, b, (top + 1) * BLOCK, cutoff) end
    end
    local ptr = pv[b + $PTR]
    if ptr % BLOCK == 0 then
      local a = ptr / BLOCK
      local _, last, cum, cost, _, _, o = record_of(p, pv, a)
      if last and last <= cutoff then
        -- Block a left whole: so did every block up to the first that did
        -- not (every complete one, when the last did).
        local _, tl = record_of(p, pv, top)
        if tl and tl <= cutoff then return recount(p, pv, b, (top + 1) * BLOCK, cutoff) end
        local j = search(p, pv, a + 1, top, o, function(_, l) return l > cutoff end)
        local upto = j and through(p, pv, j - 1, o)
        if upto then
          pv[b + $SUM] = pv[b + $SUM] - (upto - (cum - cost))
          pv[b + $PTR], pv[b + $OLDEST], ptr = j * BLOCK, 0, j * BLOCK
        end
      end
    end
    if ptr < pv[$TAIL] then
      -- (a busy window sheds a call or two a charge: read two, then more)
      local e = chunk(p, pv, ptr, pv[$TAIL], n)
      n = min(4 * n, BLOCK)
      if #e == 0 then return false end
      pv[b + $OLDEST] = 0
      for j = 1, #e, ENTRY do
        local t = tonumber(e[j])
        if t > cutoff then
          pv[b + $OLDEST] = t
          return true
        end
        pv[b + $SUM] = pv[b + $SUM] - tonumber(e[j + 1])
        pv[b + $PTR] = pv[b + $PTR] + 1
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
  local freed, ptr, walk_to = 0, pv[b + $PTR], pv[b + $PTR]
  while ptr < pv[$TAIL] do
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
    if ptr < pv[$TAIL] then
      local e = chunk(p, pv, ptr, pv[$TAIL])
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
