package cluster

import (
	"encoding/json"
	"hash/fnv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rotor-proxy/rotor/health"
)

// record is a shared record as stored in Redis (one JSON string per
// upstream under "<prefix>:rec:<key>") and published on
// "<prefix>:events". Times are wall-clock Unix milliseconds: no monotonic
// reading ever leaves the process.
type record struct {
	Key    string `json:"key"`
	V      int64  `json:"v"` // incremented by every write (writeScript)
	State  string `json:"state"`
	From   string `json:"from"`
	Reason string `json:"reason"`
	Stage  string `json:"stage"`
	Detail string `json:"detail"`
	Until  int64  `json:"until"` // end of cooling; 0 unless cooling
	Streak int    `json:"streak"`
	At     int64  `json:"at"`   // time of the transition
	Inst   string `json:"inst"` // instance that wrote the state
	Tok    string `json:"tok"`  // that instance's process token
	// OpAt and OpInst stamp the newest operator action (admin or config
	// disable or enable) the record knows: operator actions are ordered
	// among themselves by it, and one that disabled the upstream holds
	// until a newer one (writeScript).
	OpAt   int64  `json:"opat,omitempty"`
	OpInst string `json:"opinst,omitempty"`
	// Cred is the writer's credential fingerprint (fingerprint) on an
	// automatic transition: instances using other credentials for the
	// upstream keep their own state over a failure that depends on the
	// credentials (credFailure), and an instance whose own credentials
	// were rejected keeps that over another's record (keepsOwnCred).
	Cred string `json:"cred,omitempty"`
	Hist []hist `json:"hist,omitempty"`
}

// credFailure reports whether rec is a failure that depends on the
// credentials the writer used: an auth_rejected cooling or automatic
// disable (a proxy_auth failure, or a probe the proxy refused so).
func credFailure(rec record) bool {
	return rec.Reason == health.AuthRejected.String() && rec.Stage != health.StageOperator.String() &&
		(rec.State == health.Cooling.String() || rec.State == health.Disabled.String())
}

// hist is one shared history entry.
type hist struct {
	At     int64  `json:"at"`
	From   string `json:"from"`
	To     string `json:"to"`
	Reason string `json:"reason"`
	Stage  string `json:"stage"`
	Detail string `json:"detail"`
	Inst   string `json:"inst"`
	// Cred is the writer's credential fingerprint on a credential
	// failure's entry: on an instance with other credentials it is not
	// the record's last failure (Cluster.remote).
	Cred string `json:"cred,omitempty"`
}

func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMS(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v)
}

// newRecord encodes a local transition (Round(0): wall clock only). An
// operator action stamps the record with itself (OpAt, OpInst).
func newRecord(rs health.RemoteState, inst, tok string) record {
	r := record{
		Key: rs.Key, State: rs.State.String(), From: rs.From.String(),
		Reason: rs.Reason.String(), Stage: rs.Stage.String(), Detail: rs.Detail,
		Until: ms(rs.Until.Round(0)), Streak: rs.Streak, At: ms(rs.At.Round(0)),
		Inst: inst, Tok: tok,
	}
	if operatorAction(rs.State, rs.Stage) {
		r.OpAt, r.OpInst = r.At, inst
	}
	return r
}

// operatorAction reports whether a transition to state at stage is an
// operator's (an admin disable or enable, or the config's disabled
// changing): only those end an operator's disable (writeScript).
func operatorAction(state health.State, stage health.Stage) bool {
	return stage == health.StageOperator && (state == health.Disabled || state == health.ProbeAllowed)
}

// remote decodes r for the tracker. Unknown strings (a newer peer) decode
// as zero values; an unknown state makes ok false.
func (r record) remote() (rs health.RemoteState, ok bool) {
	if err := rs.State.UnmarshalText([]byte(r.State)); err != nil {
		return rs, false
	}
	_ = rs.From.UnmarshalText([]byte(r.From))
	rs.Reason, _ = health.ParseClass(r.Reason)
	_ = rs.Stage.UnmarshalText([]byte(r.Stage))
	rs.Key, rs.Detail, rs.Streak, rs.Instance = r.Key, r.Detail, r.Streak, r.Inst
	rs.Until, rs.At = fromMS(r.Until), fromMS(r.At)
	rs.OpAt = fromMS(r.OpAt)
	for _, h := range r.Hist {
		var tr health.Transition
		_ = tr.From.UnmarshalText([]byte(h.From))
		_ = tr.To.UnmarshalText([]byte(h.To))
		tr.Reason, _ = health.ParseClass(h.Reason)
		_ = tr.Stage.UnmarshalText([]byte(h.Stage))
		tr.At, tr.Detail, tr.Instance = fromMS(h.At), h.Detail, h.Inst
		if h.Inst != "" {
			tr.Detail += instanceSuffix(h.Inst)
		}
		rs.History = append(rs.History, tr)
	}
	return rs, true
}

// instanceSuffix is what a shared history entry's detail ends with on
// every instance: the instance that made the transition.
func instanceSuffix(inst string) string { return " (instance " + inst + ")" }

// sum is a digest of r's content but its version (FNV-1a of its JSON):
// one version of a record holds one content, unless Redis lost or rolled
// the record back and versions were written again over it.
func (r record) sum() uint64 {
	r.V = 0
	b, _ := json.Marshal(r) // plain fields: cannot fail
	h := fnv.New64a()
	_, _ = h.Write(b)
	return h.Sum64()
}

func decodeRecord(s string) (record, error) {
	var r record
	err := json.Unmarshal([]byte(s), &r)
	return r, err
}

// writeScript is the compare-and-set of a shared record, atomic in Redis.
// KEYS[1] is the record, KEYS[2] the channel; ARGV[1] the new record,
// ARGV[2] the history bound, ARGV[3] the max clock skew in milliseconds
// (a transition's time further ahead of Redis's clock is Redis's), ARGV[4]
// the newest version of the record the writer has seen. The record's
// version goes above the stored one and ARGV[4] on every write (a version
// never repeats with other content, even after a lost or rolled-back key)
// and the result is published on KEYS[2] in the same atomic step.
// Returns {1 if the new state was applied else 0, record}.
//
// Which state wins (every instance converges on the one Redis keeps):
//
//   - An operator action (stage "operator": an admin disable or enable, or
//     the config's disabled changing) is ordered only against operator
//     actions, by their stamp (opat, opinst: time, then instance name). The
//     record keeps the stamp of the newest one it knows. A newer operator
//     action wins whatever the state's time; an older one does not.
//   - An enable that wins over an eligible record leaves it eligible (its
//     history entry goes from eligible to eligible): only the order of
//     operator actions changes.
//   - While an operator action holds the upstream disabled, nothing else
//     ends it: an automatic transition (a probe, a failure) never wins over
//     it, whatever its time, and is not added to the history either
//     unless it was made before the disable.
//   - A credential failure (credFailure) does not win over a state that
//     is no credential failure and was made with other credentials (cred):
//     a stale password on one instance does not overwrite the fleet's
//     eligible record; the failure joins the history.
//   - Otherwise the transition that is not older wins (time, then
//     instance name).
//
// A transition that does not win still joins the history (sorted by time,
// bounded by ARGV[2]), so that concurrent transitions from several
// instances are all listed; an identical entry is never listed twice.
var writeScript = redis.NewScript(recordLua + `
local rec, applied = merge(false)
local out = cjson.encode(rec)
redis.call('SET', KEYS[1], out)
redis.call('PUBLISH', KEYS[2], out)
return {applied, out}
`)

// recordLua is the part of writeScript shared with the re-seeding script:
// merge(seed) decides between ARGV[1] and the stored record and merges the
// history. A seed (a record put back, with its history, by an instance that
// knows it) wins only when strictly newer, and brings its whole history.
const recordLua = `
local new = cjson.decode(ARGV[1])
local hmax = tonumber(ARGV[2])
-- ARGV[4]: the newest version of this record the writer has seen. The
-- version written is above both it and the stored one, so that a version
-- never comes back with other content: a key deleted or evicted (versions
-- restarted at 1) or rolled back to an older copy reused versions the
-- instances had already seen for the newer content, and they skipped the
-- transition written over it.
local minv = 0
if ARGV[4] then minv = tonumber(ARGV[4]) or 0 end

local function num(v) return tonumber(v) or 0 end
local function str(v)
  if v == nil or v == cjson.null then return '' end
  return tostring(v)
end
-- cmp orders two (time, instance) stamps: 1, 0 or -1.
local function cmp(a1, i1, a2, i2)
  a1, a2 = num(a1), num(a2)
  if a1 ~= a2 then
    if a1 > a2 then return 1 end
    return -1
  end
  i1, i2 = str(i1), str(i2)
  if i1 == i2 then return 0 end
  if i1 > i2 then return 1 end
  return -1
end
-- credfail: a failure that depends on the writer's credentials
-- (credFailure in Go).
local function credfail(r)
  return str(r.reason) == 'auth_rejected' and str(r.stage) ~= 'operator' and
    (str(r.state) == 'cooling' or str(r.state) == 'disabled')
end
local function hkey(e) return str(e.at) .. '|' .. str(e.to) .. '|' .. str(e.inst) .. '|' .. str(e.detail) end

local function merge(seed)
  local entries = {}
  if seed then
    if type(new.hist) == 'table' then entries = new.hist end
  else
    -- A transition's time is the writer's clock. One far ahead of
    -- Redis's (by more than ARGV[3] ms, the fleet's max clock skew) is
    -- Redis's time instead: a peer with a clock hours ahead won every
    -- ordering by time, so the others' later transitions (a probe that
    -- passed) lost to its older one until their clocks caught up.
    -- Operator actions keep their time, and every write its operator
    -- stamp (opat), as written: an automatic write carries the newest
    -- stamp its instance knows, and bounding them would let it pass a
    -- disable with the same bound stamp; and an operator action's history
    -- entry must sort where its stamp orders it (bounded, a fast peer's
    -- disable was listed before the enable it won over, so the history's
    -- last entry was not the state and no instance put the record back
    -- after an empty Redis restart).
    local skew = tonumber(ARGV[3])
    local op = new.stage == 'operator' and (new.state == 'disabled' or new.state == 'probe_allowed')
    if skew and not op then
      local clock = redis.call('TIME')
      local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
      if num(new.at) > now + skew then new.at = now end
    end
    local cred = nil
    if credfail(new) and str(new.cred) ~= '' then cred = new.cred end
    entries = {{at=new.at, from=new.from, to=new.state, reason=new.reason, stage=new.stage, detail=new.detail, inst=new.inst, cred=cred}}
  end
  new.hist = nil
  local raw = redis.call('GET', KEYS[1])
  local cur = nil
  if raw then cur = cjson.decode(raw) end
  local rec, win, keep, opnewer = new, true, true, false
  local hcur = {}
  if cur then
    local isop = new.stage == 'operator' and (new.state == 'disabled' or new.state == 'probe_allowed')
    local opdis = cur.state == 'disabled' and cur.stage == 'operator'
    local op = cmp(new.opat, new.opinst, cur.opat, cur.opinst)
    local t = cmp(new.at, new.inst, cur.at, cur.inst)
    local newer = t > 0 or (t == 0 and not seed)
    if isop then
      win = op > 0 or (op == 0 and newer)
    elseif opdis then
      win = op > 0 -- only a writer that knows a newer operator action
    elseif not seed and credfail(new) and not credfail(cur) and str(new.cred) ~= '' and
        str(cur.cred) ~= '' and str(cur.cred) ~= str(new.cred) then
      -- The writer's credentials were rejected; the stored state was
      -- made with other ones (a probe that passed there): it stands for
      -- the fleet, and the failure joins the history. (An instance with
      -- a stale password overwrote the fleet's eligible record at every
      -- failure.)
      win = false
    else
      win = newer
    end
    -- An automatic transition made before the disable took effect
    -- before it: history, whichever reached Redis first (the filter
    -- below keeps the same entries).
    keep = seed or win or isop or not opdis or num(new.at) <= num(cur.opat)
    opnewer = op > 0
    if not win then rec = cur end
    -- An enable that wins over an eligible record leaves it eligible:
    -- enabling a serving upstream changes nothing but the order of
    -- operator actions (opat) and the history, which says so. (Such an
    -- enable was dropped by the instance that saw the record eligible,
    -- and an older disable from another instance won.)
    if win and isop and new.state == 'probe_allowed' and cur.state == 'eligible' then
      rec = cur
      if not seed then entries[1].from, entries[1].to = 'eligible', 'eligible' end
    end
    if op > 0 then
      rec.opat, rec.opinst = new.opat, new.opinst
    else
      rec.opat, rec.opinst = cur.opat, cur.opinst
    end
    if type(cur.hist) == 'table' then hcur = cur.hist end
    rec.v = math.max(num(cur.v), minv)
  else
    rec.v = minv
  end
  local h, known, added = {}, {}, 0
  for _, e in ipairs(hcur) do
    table.insert(h, e)
    known[hkey(e)] = true
  end
  local stored = {}
  for k in pairs(known) do stored[k] = true end
  if keep then
    for _, e in ipairs(entries) do
      local k = hkey(e)
      if not known[k] then
        known[k] = true
        table.insert(h, e)
      end
    end
  end
  local pos = {}
  for i, e in ipairs(h) do pos[e] = i end
  table.sort(h, function(a, b)
    local x, y = num(a.at), num(b.at)
    if x ~= y then return x < y end
    return pos[a] < pos[b]
  end)
  -- While an operator's disable holds, what other instances did after it
  -- never took effect: it is no history. (A seed merging the put-back
  -- record with a fresh instance's probe, written first into an empty
  -- Redis, listed that probe after the disable; the instances then had a
  -- last shared entry that was not their state and put nothing back at
  -- the next empty restart.)
  if rec.state == 'disabled' and rec.stage == 'operator' and num(rec.opat) > 0 then
    local held = {}
    for _, e in ipairs(h) do
      if num(e.at) <= num(rec.opat) or e.stage == 'operator' then table.insert(held, e) end
    end
    h = held
  end
  while #h > hmax do table.remove(h, 1) end
  -- Only entries that stay count as added: a seed's entries older than
  -- the bounded history brings nothing (a put-back racing another
  -- instance's writes rewrote an unchanged record, one version more).
  for _, e in ipairs(h) do
    if not stored[hkey(e)] then added = added + 1 end
  end
  if #h > 0 then rec.hist = h else rec.hist = nil end
  rec.v = rec.v + 1
  local applied = 0
  if win then applied = 1 end
  -- A stored version not above the writer's is a lost or rolled-back
  -- record: a seed rewrites it, changed or not, at a version above.
  local behind = cur ~= nil and num(cur.v) <= minv
  return rec, applied, win or opnewer or added > 0 or behind, raw
end
`

// renewScript extends a lease if the caller still owns it.
var renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`)

// releaseScript deletes a lease if the caller still owns it (a lease that
// expired and was taken over is someone else's).
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)
