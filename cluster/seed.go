package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/rotor-proxy/rotor/health"
)

// Putting records back. A Redis that restarted empty (a new generation),
// lost a key, or came back from an older snapshot no longer holds what the
// fleet knew: an operator's disable, the history. Every instance puts
// back what it knows (reconcile → seed); seedScript merges it with what
// another instance may have written meanwhile by writeScript's rules.

// stamp orders operator actions: time (Unix ms), then instance name.
type stamp struct {
	at   int64
	inst string
}

func (s stamp) after(o stamp) bool { return s.at > o.at || s.at == o.at && s.inst > o.inst }

// seedRecord encodes rs (from Tracker.Shared) for seedScript: the state as
// published by the instance that made it (inst, or self when it was this
// one), with the shared history and the newest operator action known
// (op, or a newer one in the history).
func seedRecord(rs health.RemoteState, self, tok string, op stamp) record {
	inst := rs.Instance
	if inst == "" {
		inst = self
	}
	r := newRecord(rs, inst, tok)
	if rs.Instance != "" {
		r.Detail = strings.TrimSuffix(rs.Detail, instanceSuffix(rs.Instance))
	}
	if s := (stamp{r.OpAt, r.OpInst}); s.after(op) {
		op = s
	}
	for _, h := range rs.History {
		e := hist{At: ms(h.At.Round(0)), From: h.From.String(), To: h.To.String(), Reason: h.Reason.String(),
			Stage: h.Stage.String(), Detail: h.Detail, Inst: h.Instance}
		if e.Inst == "" {
			e.Inst = self
		} else {
			e.Detail = strings.TrimSuffix(e.Detail, instanceSuffix(e.Inst))
		}
		if s := (stamp{e.At, e.Inst}); (operatorAction(h.To, h.Stage) || enableEntry(h)) && s.after(op) {
			op = s
		}
		r.Hist = append(r.Hist, e)
	}
	r.OpAt, r.OpInst = op.at, op.inst
	return r
}

// enableEntry reports whether h is an operator's enable that changed no
// state (from eligible or probe_allowed to the same: health's
// enabledHere, or writeScript keeping an eligible record eligible).
func enableEntry(h health.Transition) bool {
	return h.Stage == health.StageOperator && h.Reason == health.Operator && h.From == h.To &&
		(h.To == health.Eligible || h.To == health.ProbeAllowed)
}

// seedItem is a record to put back: its key and what Redis holds for it
// (nil: nothing).
type seedItem struct {
	key    string
	stored *record
}

// seed puts back the records items as this instance knows them
// (seedScript), then applies what Redis holds for each: the seed, or a
// record another instance wrote that wins over it. A record this instance
// has made no shared transition for (a fresh one) is not put back; what
// Redis holds for it is applied.
func (c *Cluster) seed(items []seedItem) error {
	recs := make([]record, 0, len(items))
	minv := make([]int64, 0, len(items))
	for _, it := range items {
		c.mu.Lock()
		op := c.ops[it.key]
		seen := c.seen[it.key]
		c.mu.Unlock()
		rs, ok := c.tr.Shared(it.key)
		if !ok {
			if it.stored != nil {
				// Nothing to put back: take what Redis holds, whatever
				// version this instance saw.
				c.mu.Lock()
				delete(c.seen, it.key)
				delete(c.sums, it.key)
				c.mu.Unlock()
				c.consider(*it.stored, false)
			}
			continue
		}
		r := seedRecord(rs, c.cfg.Instance, c.tok, op)
		if r.Inst == c.cfg.Instance && credFailure(r) {
			r.Cred = c.credOf(it.key) // this instance's failure: its credentials
		}
		recs = append(recs, r)
		// The record goes back above every version seen (writeScript's
		// ARGV[4]), so that the other instances apply it.
		minv = append(minv, seen)
	}
	if len(recs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(c.ctx, opTimeout)
	defer cancel()
	if err := seedScript.Load(ctx, c.rdb).Err(); err != nil {
		return err
	}
	cmds := make([]*redis.Cmd, len(recs))
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, r := range recs {
			b, _ := json.Marshal(r) // plain fields: cannot fail
			cmds[i] = seedScript.EvalSha(ctx, p, []string{c.recPrefix + r.Key, c.channel}, string(b), c.cfg.History, "", minv[i])
		}
		return nil
	})
	var rerr redis.Error
	if err != nil && !errors.As(err, &rerr) {
		return err // a reply error stays with its record: skipped below
	}
	n := 0
	for _, cmd := range cmds {
		res, err := cmd.Slice()
		if err != nil || len(res) != 2 {
			continue
		}
		applied, _ := res[0].(int64)
		out, _ := res[1].(string)
		rec, err := decodeRecord(out)
		if err != nil || rec.Key == "" {
			continue
		}
		if applied == 1 {
			n++
			c.applied(rec)
			continue
		}
		c.consider(rec, false)
	}
	if n > 0 {
		c.log.Info().Int("records", n).Msg("fleet: records put back into redis")
	}
	return nil
}

// seedScript puts back a record that a Redis which restarted empty (or
// lost the key) no longer holds, or holds older than the instance knows:
// ARGV[1] is the record as the instance knows it, with its shared
// history. A missing record is stored as is. An existing one takes the
// seed's state only if the seed wins strictly (writeScript's rules: an
// operator's disable wins over an automatic state another instance wrote
// meanwhile; a seed never wins a tie), and the seed's history entries it
// lacks either way. Only a change is written and published, or a stored
// record whose version is not above ARGV[4] (the newest version the
// instance has seen: a lost or rolled-back record), which goes back above
// it. Returns
// {1 if the seed's state was applied else 0, record}.
var seedScript = redis.NewScript(recordLua + `
local rec, applied, changed, raw = merge(true)
if raw and not changed then
  return {0, raw}
end
local out = cjson.encode(rec)
redis.call('SET', KEYS[1], out)
redis.call('PUBLISH', KEYS[2], out)
return {applied, out}
`)
