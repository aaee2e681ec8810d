package cluster

import (
	"encoding/json"
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
	Hist   []hist `json:"hist,omitempty"`
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

// newRecord encodes a local transition (Round(0): wall clock only).
func newRecord(rs health.RemoteState, inst, tok string) record {
	return record{
		Key: rs.Key, State: rs.State.String(), From: rs.From.String(),
		Reason: rs.Reason.String(), Stage: rs.Stage.String(), Detail: rs.Detail,
		Until: ms(rs.Until.Round(0)), Streak: rs.Streak, At: ms(rs.At.Round(0)),
		Inst: inst, Tok: tok,
	}
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
	for _, h := range r.Hist {
		var tr health.Transition
		_ = tr.From.UnmarshalText([]byte(h.From))
		_ = tr.To.UnmarshalText([]byte(h.To))
		tr.Reason, _ = health.ParseClass(h.Reason)
		_ = tr.Stage.UnmarshalText([]byte(h.Stage))
		tr.At, tr.Detail = fromMS(h.At), h.Detail
		if h.Inst != "" {
			tr.Detail += " (instance " + h.Inst + ")"
		}
		rs.History = append(rs.History, tr)
	}
	return rs, true
}

// settled reports whether r makes a probe needless at now: a probe passed
// (eligible), an operator disabled it, or a cooldown still runs.
func (r record) settled(now time.Time) bool {
	switch r.State {
	case "eligible", "disabled":
		return true
	case "cooling":
		return r.Until > now.UnixMilli()
	}
	return false
}

func decodeRecord(s string) (record, error) {
	var r record
	err := json.Unmarshal([]byte(s), &r)
	return r, err
}

// writeScript is the compare-and-set of a shared record, atomic in Redis.
// The record's version increments on every write. The new transition
// always joins the shared history (sorted by time, bounded by ARGV[2]); it
// becomes the record's state only when it is not older than the stored
// one (time, then instance name, breaks the tie), so concurrent
// transitions from several instances never overwrite a newer one and every
// instance converges on the same record. The result is published on
// KEYS[2] in the same atomic step. Returns {1 if applied else 0, record}.
var writeScript = redis.NewScript(`
local new = cjson.decode(ARGV[1])
local hmax = tonumber(ARGV[2])
local entry = {at=new.at, from=new.from, to=new.state, reason=new.reason, stage=new.stage, detail=new.detail, inst=new.inst}
local raw = redis.call('GET', KEYS[1])
local rec
local applied = 1
if raw then
  local cur = cjson.decode(raw)
  local h = cur.hist
  if type(h) ~= 'table' then h = {} end
  table.insert(h, entry)
  table.sort(h, function(a, b) return (tonumber(a.at) or 0) < (tonumber(b.at) or 0) end)
  while #h > hmax do table.remove(h, 1) end
  local cat, cinst = tonumber(cur.at) or 0, tostring(cur.inst or '')
  if new.at > cat or (new.at == cat and new.inst >= cinst) then
    rec = new
  else
    rec = cur
    applied = 0
  end
  rec.hist = h
  rec.v = (tonumber(cur.v) or 0) + 1
else
  rec = new
  rec.hist = {entry}
  rec.v = 1
end
local out = cjson.encode(rec)
redis.call('SET', KEYS[1], out)
redis.call('PUBLISH', KEYS[2], out)
return {applied, out}
`)

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
