-- shared/layout.lua: the packed formats of the state hash's fields, for
-- every script (src/ledger/redis/scripts.rs puts it, after the layout's
-- constants, in front of each; lua/charge.lua describes the fields).
--
-- meta: last decision time, charge serial, retain µs, expiry µs, when the
-- whole log was lost. An index record: first and last call's time,
-- cumulative cost, the block's cost, calls, the block's number, its origin.
local META, RECORD = '$META_FORMAT', '$RECORD_FORMAT'
-- A pool:P field of this layout holds 8 + 4m numbers (m windows); older
-- layouts hold a number of them that is not a multiple of 4, or a meta of
-- four numbers: the scripts refuse them (OLDER_LAYOUT).
local function layout(m)
  return m == 1 and '$FORMAT1' or '<' .. string.rep('d', $FIXED + $WIN * m)
end
