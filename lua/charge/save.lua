-- charge/save.lua: what the general path replies and writes: the units
-- left per window, the expiries renewed, every pool's state and meta saved
-- (with the decision's time alone, for a decision that records nothing).

-- The units left in every window, in ARGV order, after the fields of reply;
-- then each pool's entry's call number (none: -1).
local function remaining(reply, logged)
  local r, a = #reply, 8 + npools
  for p = 1, npools do
    local pv = pools[p]
    for w = 1, pv[$M] do
      reply[r + w] = tonumber(ARGV[a + 2 * w + 1]) - pv[$WIN * w + $SUM] - (w == pv.lw and pv.extra or 0)
    end
    r, a = r + pv[$M], a + 2 + 2 * pv[$M]
  end
  for p = 1, npools do reply[r + p] = logged and p <= nrec and pools[p][$TAIL] - 1 or -1 end
  for k = 1, 3 do reply[r + npools + k] = observed[k] end
  for p = 1, npools do
    reply[r + npools + 2 + 2 * p], reply[r + npools + 3 + 2 * p] = pools[p].extra, pools[p].lw
  end
  return reply
end

-- Renew the expiry of pool p's log and index, to pv.expires: their tail's
-- segments, or with `all` every segment that still holds calls.
local function renew(p, pv, all)
  local ms, kt = floor((pv.expires - now) / 1000), floor((pv[$TAIL] - 1) / SEG)
  for k = all and floor(pv[$HEAD] / SEG) or kt, kt do
    call('PEXPIRE', log_seg(p, k), ms)
    call('PEXPIRE', ix_seg(p, k), ms)
  end
end

-- The HSET arguments that save every pool's state, then any given after.
local u, n = {}, 0
local function save_pools()
  for p = 1, npools do
    local pv = pools[p]
    local m = pv[$M]
    if pv.renew_all and not pv.rebuild then
      -- (a pool whose longest window grew: every segment, once)
      pv.expires = max(pv.expires, renew_to)
      renew(p, pv, true)
    end
    pv[$WIN * m + $EXPIRES], pv[$WIN * m + $LOST], pv[$WIN * m + $DEAD] = pv.expires, pv.lost, pv.dead
    -- (the general path keeps no front: the next fast charge reads it anew)
    u[n + 3], u[n + 4] = 'front:' .. ARGV[7 + p], ''
    u[n + 1] = ARGV[7 + p]
    if pv.rebuild then
      -- (a pool out of step with its log starts it afresh and keeps no
      -- windows: the next call counts them afresh)
      restart(p, pv[$TAIL])
      u[n + 2] = spack(layout(0), pv[$TAIL], pv[$TAIL], 0, pv.expires, pv.lost, pv.dead, pv.others, pv.others_until)
    else
      pv[$WIN * m + $OTHERS], pv[$WIN * m + $OTHERS_UNTIL] = pv.others, pv.others_until
      u[n + 2] = spack(layout(m), unpack(pv, 1, $FIXED + $WIN * m))
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
-- (swap: the held windows of pools from `from` on, and back)
local function swap(from)
  for p = from, npools do
    local pv = pools[p]
    for w, h in pairs(pv.held or {}) do
      local b = $WIN * w
      pv[b + $SUM], pv[b + $PTR], pv[b + $OLDEST], h[1], h[2], h[3] = h[1], h[2], h[3], pv[b + $SUM], pv[b + $PTR], pv[b + $OLDEST]
    end
  end
end
local function save_slid()
  swap(1)
  save_state(stored_retain)
  swap(1)
end
