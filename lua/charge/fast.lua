-- charge/fast.lua: the common charge in straight-line code (fast_charge),
-- defined first: a function of its arguments, Redis's globals and the
-- constants only. charge/open.lua calls it; nil sends the general path.

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
-- A function of its arguments and Redis's globals only, the constants it
-- reads among its arguments: each local of the chunk that a closure
-- captures costs ~450 instructions a call (made, closed, collected; the
-- ten constants as upvalues cost 5k, measured on 6c599e1), an
-- argument a move. The general path's functions, closures over that
-- path's state, are not shared with it for the same reason; even the one
-- step both do alike (the call appended, added to every window), shared
-- as a function of its arguments, costs 1.3-2.2k instructions a call
-- (measured on 40fed32).
local function fast_charge(v, now, now_text, npools, horizon, visible, expires, serial, shares,
                           ENTRY, SEG, BLOCK, FRONT, REACH, SLOT, META, TRIM_EVERY, MINUTE, layout)
  local KEYS, ARGV, call = KEYS, ARGV, redis.call
  local spack, sunpack, floor, min, max = struct.pack, struct.unpack, math.floor, math.min, math.max
  if not v[1] or #v[1] ~= 8 * $META_FIELDS or not v[3] then return end
  -- (each pool's state, pv, holds past its packed fields its cost and
  -- then its windows' budgets, parsed once; fronts: those read to be
  -- kept, by pool, made when one is)
  local pvs, a, longest, fronts = {}, 8 + npools, horizon, nil
  for p = 1, npools do
    local packed, m, cost = v[3 + p], ARGV[a + 1] + 0, ARGV[a] + 0
    if not packed or #packed ~= 8 * ($FIXED + $WIN * m) then return end
    local pv = { sunpack(layout(m), packed) }
    if pv[$M] ~= m or pv[$WIN * m + $LOST] ~= 0 or pv[$WIN * m + $OTHERS_UNTIL] > now then return end
    pv[$WIN * m + $COST] = cost
    for w = 1, m do
      local len, budget = ARGV[a + 2 * w] + 0, ARGV[a + 2 * w + 1] + 0
      if len <= 0 or pv[$WIN * w] ~= len or cost > budget then return end
      if len > longest then longest = len end
      pv[$WIN * m + $BUDGET + w] = budget
    end
    pvs[p], a = pv, a + 2 + 2 * m
  end
  local retain = max(visible, longest)
  local keep = retain + MINUTE
  -- (renewing any expiry is the general path's)
  if expires == nil or expires < now + keep then return end
  -- (shares, past the pools' layouts: the pools recorded, the first nrec;
  -- the rest, other shares' pools, are slid and read only)
  local sh, nrec = a, npools
  if shares then nrec = ARGV[a + 1] + 0 end
  a = 8 + npools
  for p = 1, npools do
    local pv, m = pvs[p], pvs[p][$M]
    local cost = pv[$WIN * m + $COST]
    local tail = pv[$TAIL]
    if pv[$WIN * m + $EXPIRES] > expires then return end
    if p > nrec then
      -- (only read: a log past its expiry, or a window that reaches past
      -- the retention (see the general path's save_slid), is the general
      -- path's)
      if tail > pv[$HEAD] and pv[$WIN * m + $EXPIRES] <= now then return end
      for w = 1, m do
        if pv[$WIN * w] > visible then return end
      end
    -- (a list made, as a segment opens or an empty log restarts, or a
    -- block closed by this call: the general path's)
    elseif pv[$WIN * m + $EXPIRES] < now + keep or tail % SEG == 0 or tail == pv[$HEAD]
        or (tail + 1) % BLOCK == 0 then
      return
    end
    local dead_cut = max(now - visible, pv[$WIN * m + $DEAD])
    local front = v[3 + npools + p]
    if front and #front ~= m * SLOT then front = nil end
    local oldest, lw, lwlen = nil, 1, 0
    for w = 1, m do
      local b, len = $WIN * w, pv[$WIN * w]
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
      while pv[b + $PTR] < tail and (pv[b + $OLDEST] == 0 or pv[b + $OLDEST] <= cutoff) do
        local ptr = pv[b + $PTR]
        if ptr < c0 or ptr >= c0 + cn then
          if reads == 2 then return end
          reads = reads + 1
          local k = floor(ptr / SEG)
          local start, keep = max(pv[$HEAD], k * SEG), ptr + FRONT + REACH < tail
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
          pv[b + $OLDEST] = t
        else
          pv[b + $SUM], pv[b + $PTR], pv[b + $OLDEST] = pv[b + $SUM] - c, ptr + 1, 0
        end
      end
      if pv[b + $SUM] + cost > pv[$WIN * m + $BUDGET + w] then return end
      if now - len <= dead_cut then oldest = pv[b + $PTR] end
    end
    -- (a trim due: the general path's; a pool only read trims nothing and
    -- keeps its dead mark)
    if p <= nrec then
      if oldest and oldest > pv[$HEAD] then return end
      if not oldest and ((tail + 1) % TRIM_EVERY == 0 or pv[$WIN * lw + $PTR] >= tail) then return end
      pv[$WIN * m + $DEAD] = dead_cut
    end
    a = a + 2 + 2 * m
  end
  -- Shares (the general path's charge/decide.lua): in every window of the
  -- charge's own pools, the units left after it cover every other share's
  -- unused reserve (sliding windows only here: none lends); if not, the
  -- general path refuses.
  if shares then
    local i = sh + 3
    for p = 1, ARGV[sh] + 0 do
      local pv, k = pvs[p], ARGV[i] + 0
      local m = pv[$M]
      for w = 1, m do
        local unused = 0
        for r = i + 1, i + k * (1 + m), 1 + m do
          local left = ARGV[r + w] - pvs[ARGV[r] + 0][$WIN * w + $SUM]
          if left > 0 then unused = unused + left end
        end
        if pv[$WIN * w + $SUM] + pv[$WIN * m + $COST] + unused > pv[$WIN * m + $BUDGET + w] then return end
      end
      i = i + 1 + k * (1 + m)
    end
  end
  -- Record the call once per pool, and save.
  serial = serial + 1
  local u, reply, r = {}, { 1, now, serial, 0 }, 4
  a = 8 + npools
  for p = 1, npools do
    local pv = pvs[p]
    local m = pv[$M]
    local cost = pv[$WIN * m + $COST]
    local k = floor(pv[$TAIL] / SEG)
    -- (a pool only read: its slid windows saved, nothing logged)
    local len = p > nrec and (pv[$TAIL] - max(pv[$HEAD], k * SEG)) * ENTRY
    if not len then
      len = call('RPUSH', KEYS[1 + p] .. ':' .. k, now_text, ARGV[a], v[3], ARGV[2])
      pv[$TAIL] = pv[$TAIL] + 1
      for w = 1, m do
        local b = $WIN * w
        if pv[b + $PTR] == pv[$TAIL] - 1 then pv[b + $OLDEST] = now end -- the window was empty
        pv[b + $SUM] = pv[b + $SUM] + cost
      end
    end
    if len ~= (pv[$TAIL] - max(pv[$HEAD], k * SEG)) * ENTRY then
      -- The log is not what the state says (as in the general path's
      -- record): started afresh, counted as spent for a while.
      call('UNLINK', KEYS[1 + p] .. ':' .. k, KEYS[1 + npools + p] .. ':' .. k)
      u[#u + 1], u[#u + 2] = ARGV[7 + p], spack(layout(0), pv[$TAIL], pv[$TAIL], 0, pv[$WIN * m + $EXPIRES], now, pv[$WIN * m + $DEAD],
        pv[$WIN * m + $OTHERS], pv[$WIN * m + $OTHERS_UNTIL])
      fronts = fronts or {}
      fronts[p] = ''
    else
      u[#u + 1], u[#u + 2] = ARGV[7 + p], spack(layout(m), unpack(pv, 1, $FIXED + $WIN * m))
    end
    if fronts and fronts[p] then u[#u + 1], u[#u + 2] = 'front:' .. ARGV[7 + p], fronts[p] end
    for w = 1, m do reply[r + w] = pv[$WIN * m + $BUDGET + w] - pv[$WIN * w + $SUM] end
    r, a = r + m, a + 2 + 2 * m
  end
  call('HSET', KEYS[1], 'meta', spack(META, now, serial, retain, expires, 0), unpack(u))
  for p = 1, npools do reply[r + p] = p <= nrec and pvs[p][$TAIL] - 1 or -1 end
  reply[r + npools + 1], reply[r + npools + 2], reply[r + npools + 3] = 0, 0, 0
  -- (no others' units on this path: see the general path's reply)
  for p = 1, npools do reply[r + npools + 2 + 2 * p], reply[r + npools + 3 + 2 * p] = 0, 1 end
  return reply
end
