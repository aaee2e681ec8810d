package gateway

// state_file (issue 6): a JSON snapshot of every upstream record, so that
// a restart forgets neither disabled nor cooling upstreams. Deadlines are
// stored as wall-clock times (the tracker's monotonic deadlines mean
// nothing to another process) and turned back into tracker deadlines by
// health.Tracker.Restore.
//
// The records the tracker keeps of removed upstreams (for 15 minutes, so
// that an upstream back in the config gets its record back) are written
// too, under "removed" with the wall-clock time of the removal, and go
// back into the tracker on start (health.Tracker.RestoreRemoved): the
// promise holds across a restart. Files without "removed" (written
// before it existed) load as before; older rotors ignore it.
//
// Writes are atomic: a temporary file in the same directory, fsync,
// rename over the old file, fsync of the directory. A crash leaves either
// the old or the new snapshot, never a torn one. A file that cannot be
// parsed is renamed aside to <file>.corrupt-<timestamp> and start-up goes
// on without it; when it cannot be set aside, rotor does not write the
// state file at all rather than destroy what an operator may want back.
// A path rotor could never write (its directory is a file, cannot be made
// or takes no new file) is a -check error at state_file's line; a start
// says so in one warning and runs without persistence (stateDirError).
// A record that cannot be read in a file that can is skipped with a
// warning naming its line: the others, operator disables included, are
// restored.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream"
)

// stateVersion is the version of the file format written.
const stateVersion = 1

const (
	// stateDebounce bounds how often transitions cause a write: the first
	// transition after a write arms this timer, later ones ride along.
	stateDebounce = time.Second
	// stateFlush writes counters that changed without a transition
	// (successes, failures below a class's threshold) now and then.
	stateFlush = time.Minute
	// stateCostShare stretches the debounce to this many times the last
	// write's duration: with 100,000 upstreams a write takes ~0.3 s and
	// probes make transitions every second, so a fixed 1 s debounce kept
	// a core a third busy rewriting the file. Writes then use at most
	// ~1/stateCostShare of a core; a restart loses a few seconds more.
	stateCostShare = 20
	// stateRetryMin is the delay before retrying a failed write (a full
	// disk, a directory unwritable for a moment); it doubles at each
	// failure up to stateRetryMax, and a success resets it.
	stateRetryMin = time.Second
	stateRetryMax = time.Minute
)

// stateRetryDelay is the delay before the next retry of a failed write
// when the last one waited last (0: the first failure).
func stateRetryDelay(last time.Duration) time.Duration {
	if last < stateRetryMin {
		return stateRetryMin
	}
	return min(2*last, stateRetryMax)
}

// stateFile is the state-file writer's state. The zero value after init
// is idle; startStateFile starts it.
type stateFile struct {
	wake chan struct{} // buffered 1: a transition happened

	writeMu sync.Mutex // serialises writes
	// writeMu guards the fields below.
	lastRecords []byte // records part of the last write, to skip unchanged ones
	lastErr     string // last write error logged (or said at start), to log each new one once
	// unread says no state file was there to read at start (none, or a
	// parent that was a file): one that appears before rotor's first
	// write is set aside, not written over (bug: a state file put back
	// after an unwritable start lost its operator disables and history).
	unread bool

	mu sync.Mutex
	// mu guards the fields below.
	path string
	// blockedBy is why a file in the way (corrupt and not set aside, or
	// unreadable) is never written over; nil: writes go ahead.
	blockedBy error
	started   bool
	stopped   bool
	stop      chan struct{}
	done      chan struct{}
}

func (f *stateFile) init() { f.wake = make(chan struct{}, 1) }

// kick tells the writer a transition happened. It never blocks.
func (f *stateFile) kick() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// stateDoc is the file's content.
type stateDoc struct {
	Version int           `json:"version"`
	Written time.Time     `json:"written"`
	Records []stateRecord `json:"records"`
	// Removed is left out when empty.
	Removed []stateRemoved `json:"removed,omitempty"`

	// skipped are the records parseState could not read and left out.
	skipped []stateSkip
}

// stateRecord is one upstream record, keyed by the endpoint's identity
// (scheme, host, port, username: never a password).
type stateRecord struct {
	Key          string                  `json:"key"`
	Name         string                  `json:"name"`
	State        health.State            `json:"state"`
	Reason       health.Class            `json:"reason"`
	Stage        health.Stage            `json:"stage"`
	Detail       string                  `json:"detail,omitempty"`
	Until        time.Time               `json:"until,omitzero"`
	Failures     map[health.Class]uint64 `json:"failures,omitempty"`
	Counts       []stateCount            `json:"counts,omitempty"`
	Successes    uint64                  `json:"successes"`
	LastSuccess  time.Time               `json:"last_success,omitzero"`
	Streak       int                     `json:"streak"`
	ProbesOK     uint64                  `json:"probes_ok"`
	ProbesFailed uint64                  `json:"probes_failed"`
	LastProbe    time.Time               `json:"last_probe,omitzero"`
	History      []stateTransition       `json:"history"`
	Targets      []stateTarget           `json:"targets,omitempty"`
}

// stateRemoved is the record kept of an upstream that left the config
// (health.Removed).
type stateRemoved struct {
	stateRecord
	RemovedAt      time.Time `json:"removed_at"`
	ConfigDisabled bool      `json:"config_disabled,omitempty"`
}

type stateCount struct {
	Class health.Class `json:"class"`
	Stage health.Stage `json:"stage"`
	N     uint64       `json:"n"`
}

type stateTransition struct {
	At     time.Time    `json:"at"`
	From   health.State `json:"from"`
	To     health.State `json:"to"`
	Reason health.Class `json:"reason"`
	Stage  health.Stage `json:"stage"`
	Detail string       `json:"detail,omitempty"`
	Target string       `json:"target,omitempty"`
	// Instance is health.Transition.Instance (fleet mode), so that a
	// restored record can be put back into an empty fleet store as it was.
	Instance string `json:"instance,omitempty"`
}

type stateTarget struct {
	Host   string       `json:"host"`
	Reason health.Class `json:"reason"`
	Stage  health.Stage `json:"stage"`
	Until  time.Time    `json:"until"`
	Streak int          `json:"streak"`
}

// startStateFile restores the state file (when state_file is set) and
// starts the writer: a goroutine owned by the Server that writes after
// transitions (at most once per stateDebounce), every stateFlush, and a
// final time when stopStateFile is called or the Server's context ends.
// It is a no-op when state_file is unset or the writer already started.
func (s *Server) startStateFile() {
	sf := &s.metrics.persist
	path := s.cfg.Load().statePath()
	sf.mu.Lock()
	if path == "" || sf.started {
		sf.mu.Unlock()
		return
	}
	sf.started, sf.path = true, path
	sf.stop, sf.done = make(chan struct{}), make(chan struct{})
	sf.mu.Unlock()

	if err := s.loadState(); err != nil {
		s.log.Error().Err(err).Str("path", path).Msg("state file not restored")
	}
	if s.startAdded != nil {
		s.startAdded()
		s.startAdded = nil
	}
	sf.mu.Lock()
	blockedBy := sf.blockedBy
	sf.mu.Unlock()
	// What start-up says is said once: the writes that fail the same way
	// say nothing more (writeState), until the cause changes or a write
	// succeeds. Rotor runs on without persistence, as it did, and writes
	// once it can.
	said := ""
	if blockedBy != nil {
		said = stateBlocked(path, blockedBy).Error() // "not restored … (it will not be written)" said it
	} else if err := stateDirError(path); err != nil {
		said = stateUnwritable(path, err).Error()
		s.log.Warn().Str(errField, said).Str("path", path).Msg("state file cannot be written: upstream records will not survive a restart")
	}
	sf.writeMu.Lock()
	sf.lastErr = said
	sf.writeMu.Unlock()
	s.wg.Add(1)
	go func() { // owner: Server; ends on stopStateFile or when s.ctx is cancelled
		defer s.wg.Done()
		defer close(sf.done)
		s.stateLoop(sf)
	}()
}

// stopStateFile stops the writer, waits for it and writes the final
// snapshot. Call it once the prober stopped (after s.cancel and s.wg.Wait
// in Shutdown), so the final snapshot is final. Safe to call more than
// once, and without startStateFile.
func (s *Server) stopStateFile() {
	sf := &s.metrics.persist
	sf.mu.Lock()
	if !sf.started {
		sf.mu.Unlock()
		return
	}
	if !sf.stopped {
		sf.stopped = true
		close(sf.stop)
	}
	done := sf.done
	sf.mu.Unlock()
	<-done
	// The loop may have made its final write on s.ctx's end, while the
	// prober was still stopping; catch what changed since (a no-op when
	// nothing did).
	s.writeState()
}

// stateDelay is the debounce after a transition when the last write took
// cost: stateDebounce, or stateCostShare times the cost when that is longer.
func stateDelay(cost time.Duration) time.Duration { return max(stateDebounce, stateCostShare*cost) }

// kickState asks the writer for a debounced write, for changes the
// tracker observer does not report (a reload that added or removed
// upstreams). It never blocks.
func (s *Server) kickState() { s.metrics.persist.kick() }

// stateLoop is the writer. A write that fails is retried after
// stateRetryDelay (1 s doubling to 1 min) until one succeeds, whether or
// not anything changes meanwhile: it was tried again only at the next
// transition or flush, so a moment's failure (a full disk, a directory
// briefly unwritable) could leave the file a minute or more behind.
// Transitions during a retry's wait ride along with the retry. A file
// rotor refuses to write over (blockState) is not retried: nothing in
// this process changes that.
func (s *Server) stateLoop(sf *stateFile) {
	flush := time.NewTicker(stateFlush)
	defer flush.Stop()
	var debounce, retry <-chan time.Time
	var cost time.Duration    // of the last write
	var backoff time.Duration // the last retry's wait; 0 after a success
	write := func() {
		start := time.Now()
		failed := s.writeState()
		cost = time.Since(start)
		if !failed {
			backoff, retry = 0, nil
			return
		}
		backoff = stateRetryDelay(backoff)
		debounce, retry = nil, time.After(backoff)
	}
	for {
		select {
		case <-sf.wake:
			if debounce == nil && retry == nil {
				debounce = time.After(stateDelay(cost))
			}
		case <-debounce:
			debounce = nil
			write()
		case <-retry:
			retry = nil
			write()
		case <-flush.C:
			write()
		case <-sf.stop:
			s.writeState()
			return
		case <-s.ctx.Done():
			s.writeState()
			return
		}
	}
}

// writeState is saveState for the writer loop: errors are logged, each
// distinct one once (a failure repeating at every write or retry says
// nothing new), and the first write after failures says the file is
// written again. It reports whether the write failed and is worth
// retrying (not a file rotor refuses to write over).
func (s *Server) writeState() (retry bool) {
	wrote, err := s.writeStateFile()
	sf := &s.metrics.persist
	sf.writeMu.Lock()
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	report := msg != "" && msg != sf.lastErr
	recovered := wrote && sf.lastErr != ""
	if err != nil || wrote {
		sf.lastErr = msg
	}
	sf.writeMu.Unlock()
	switch {
	case report:
		s.log.Error().Str(errField, msg).Msg("state file not written")
	case recovered:
		s.log.Info().Str("path", s.statePathInUse()).Msg("state file written again")
	}
	if err == nil {
		return false
	}
	sf.mu.Lock()
	blocked := sf.blockedBy != nil
	sf.mu.Unlock()
	return !blocked
}

// statePathInUse is the state file the writer writes.
func (s *Server) statePathInUse() string {
	sf := &s.metrics.persist
	sf.mu.Lock()
	path := sf.path
	sf.mu.Unlock()
	if path == "" {
		path = s.cfg.Load().statePath()
	}
	return path
}

// removedSecrets holds the passwords of upstreams that left the config,
// by identity key, while the tracker keeps their records: the state file
// scrubs those records (health.Tracker.ExportRemoved) as it scrubs live
// ones, and the endpoint that knew the password is gone.
type removedSecrets struct {
	mu sync.Mutex
	// mu guards the field below.
	pw map[string]*url.Userinfo
}

// note keeps the passwords of the endpoints of before that are not in
// after (a config load removed them).
func (rs *removedSecrets) note(before, after []*upstream.Endpoint) {
	keys := make(map[string]bool, len(after))
	for _, e := range after {
		keys[e.Key] = true
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for _, e := range before {
		if pw := endpointPassword(e); !keys[e.Key] && pw != "" {
			if rs.pw == nil {
				rs.pw = map[string]*url.Userinfo{}
			}
			rs.pw[e.Key] = e.URL.User
		}
	}
}

// scrubbers returns a scrubber for each record of gone and forgets the
// passwords of upstreams not among them any more (back in the config, or
// forgotten by the tracker), so the map stays within the tracker's bound.
func (rs *removedSecrets) scrubbers(gone []health.Removed) []func(string) string {
	out := make([]func(string) string, len(gone))
	rs.mu.Lock()
	defer rs.mu.Unlock()
	found := 0
	for i, g := range gone {
		ui, ok := rs.pw[g.Snapshot.Key]
		if ok {
			found++
		}
		out[i] = detailScrubber(ui)
	}
	if found < len(rs.pw) {
		keep := make(map[string]*url.Userinfo, found)
		for _, g := range gone {
			if pw, ok := rs.pw[g.Snapshot.Key]; ok {
				keep[g.Snapshot.Key] = pw
			}
		}
		rs.pw = keep
	}
	return out
}

// saveState writes every record to the state file atomically. It writes
// nothing when the records are unchanged since the last write.
func (s *Server) saveState() error {
	_, err := s.writeStateFile()
	return err
}

// writeStateFile is saveState, also reporting whether it wrote the file.
func (s *Server) writeStateFile() (wrote bool, err error) {
	sf := &s.metrics.persist
	sf.mu.Lock()
	path, blockedBy := sf.path, sf.blockedBy
	sf.mu.Unlock()
	if path == "" {
		path = s.cfg.Load().statePath()
	}
	if path == "" {
		return false, nil
	}
	if blockedBy != nil {
		return false, stateBlocked(path, blockedBy)
	}
	eps := s.pool.Endpoints()
	recs := make([]stateRecord, 0, len(eps))
	for _, e := range eps {
		recs = append(recs, stateRecordOf(s.tr.Snapshot(e.Record()), e.Key, passwordScrubber(e)))
	}
	gone := s.tr.ExportRemoved()
	removed := make([]stateRemoved, 0, len(gone))
	scrubs := s.removedSecrets.scrubbers(gone)
	for i, g := range gone {
		removed = append(removed, stateRemoved{stateRecord: stateRecordOf(g.Snapshot, g.Snapshot.Key, scrubs[i]),
			RemovedAt: g.At.UTC(), ConfigDisabled: g.ConfigDisabled})
	}
	body, err := encodeRecords(recs)
	if err == nil && len(removed) > 0 {
		var more []byte
		more, err = encodeRecords(removed)
		body = append(append(body, ",\n  \"removed\": "...), more...)
	}
	if err != nil {
		return false, fmt.Errorf("state file: encode: %w", err)
	}
	sf.writeMu.Lock()
	defer sf.writeMu.Unlock()
	if bytes.Equal(body, sf.lastRecords) {
		return false, nil
	}
	// Assembled by hand so the records' bytes compared above are the ones
	// written.
	var doc bytes.Buffer
	written, _ := json.Marshal(s.clock.Now().UTC())
	fmt.Fprintf(&doc, "{\n  \"version\": %d,\n  \"written\": %s,\n  \"records\": ", stateVersion, written)
	doc.Write(body)
	doc.WriteString("\n}\n")
	if sf.unread {
		if err := s.keepAppeared(path); err != nil {
			return false, err
		}
	}
	if err := writeFileAtomic(path, doc.Bytes(), 0o600); err != nil {
		// The directory's problem, when it has one, is the cause to
		// name (the failed step would be "mkdir …" or "open
		// .rotor-state.json.tmp-123…", a name new at every write).
		if derr := stateDirError(path); derr != nil {
			return false, stateUnwritable(path, derr)
		}
		return false, fmt.Errorf("state file %s: %w", path, err)
	}
	sf.lastRecords = body
	return true, nil
}

// encodeRecords writes recs as a JSON array with one compact record per
// line: a line per upstream stays greppable, and at 100,000 upstreams the
// file is about a third smaller (and quicker to write) than indented
// JSON (measured on a half-cooling pool).
func encodeRecords[R any](recs []R) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("[")
	for i := range recs {
		line, err := json.Marshal(&recs[i])
		if err != nil {
			return nil, err
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("\n    ")
		b.Write(line)
	}
	b.WriteString("\n  ]")
	return b.Bytes(), nil
}

// stateRecordOf converts a snapshot of the record for key for the file,
// scrubbing details as the admin API does (passwordScrubber).
func stateRecordOf(snap health.Snapshot, key string, scrub func(string) string) stateRecord {
	r := stateRecord{
		Key: snap.Key, Name: snap.Name, State: snap.State, Reason: snap.Reason, Stage: snap.Stage,
		Detail: scrub(snap.Detail), Until: snap.Until, Failures: snap.Failures,
		Successes: snap.Successes, LastSuccess: snap.LastSuccess, Streak: snap.Streak,
		ProbesOK: snap.ProbesOK, ProbesFailed: snap.ProbesFailed, LastProbe: snap.LastProbe,
		History: make([]stateTransition, 0, len(snap.History)),
	}
	if r.Key == "" {
		r.Key = key
	}
	for _, c := range snap.Counts {
		r.Counts = append(r.Counts, stateCount{Class: c.Class, Stage: c.Stage, N: c.N})
	}
	for _, h := range snap.History {
		r.History = append(r.History, stateTransition{At: h.At, From: h.From, To: h.To, Reason: h.Reason,
			Stage: h.Stage, Detail: scrub(h.Detail), Target: h.Target, Instance: h.Instance})
	}
	for _, t := range snap.Targets {
		r.Targets = append(r.Targets, stateTarget{Host: t.Host, Reason: t.Reason, Stage: t.Stage, Until: t.Until, Streak: t.Streak})
	}
	return r
}

// snapshot converts a file record back for Tracker.Restore.
func (r stateRecord) snapshot() health.Snapshot {
	s := health.Snapshot{
		Key: r.Key, Name: r.Name, State: r.State, Reason: r.Reason, Stage: r.Stage, Detail: r.Detail,
		Until: r.Until, Failures: r.Failures, Successes: r.Successes, LastSuccess: r.LastSuccess,
		Streak: r.Streak, ProbesOK: r.ProbesOK, ProbesFailed: r.ProbesFailed, LastProbe: r.LastProbe,
	}
	for _, c := range r.Counts {
		s.Counts = append(s.Counts, health.FailureCount{Class: c.Class, Stage: c.Stage, N: c.N})
	}
	for _, h := range r.History {
		s.History = append(s.History, health.Transition{At: h.At, From: h.From, To: h.To, Reason: h.Reason,
			Stage: h.Stage, Detail: h.Detail, Target: h.Target, Instance: h.Instance})
	}
	for _, t := range r.Targets {
		s.Targets = append(s.Targets, health.TargetCooldown{Host: t.Host, Reason: t.Reason, Stage: t.Stage, Until: t.Until, Streak: t.Streak})
	}
	return s
}

// configDisabledDetail is the detail health gives a record the config
// disabled (health.Tracker.Add).
const configDisabledDetail = "disabled in config"

// configDisabled tells whether r reads as disabled by the config rather
// than by an operator: the file keeps no flag for a live record, and the
// config has the last word on such a disable when the upstream comes back
// (health.Removed.ConfigDisabled).
func (r stateRecord) configDisabled() bool {
	return r.State == health.Disabled && r.Reason == health.Operator && r.Detail == configDisabledDetail
}

// keepAppeared sets aside a state file found at path before rotor's first
// write when there was none to read at start: rotor did not read it and
// does not write over it. Caller holds writeMu; unread is cleared once
// nothing is left at path to keep.
func (s *Server) keepAppeared(path string) error {
	sf := &s.metrics.persist
	info, err := os.Lstat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			sf.unread = false // nothing appeared: this write makes the file rotor's
		}
		return nil // ENOTDIR and the like: the write says why
	}
	if !info.Mode().IsRegular() {
		return nil // a directory: the write fails and says so
	}
	aside, err := s.setAside(path, "unread")
	if err != nil {
		return fmt.Errorf("state file %s appeared after start and could not be set aside (%w): not written over", path, pathCause(err))
	}
	sf.unread = false
	s.log.Warn().Str("path", path).Str("aside", aside).
		Msg("state file appeared after start (none could be read then): set aside, not read; to restore from it, stop rotor, move it back and start rotor")
	return nil
}

// maxSkipLogged bounds the lines logged for unreadable records of one
// state file; the rest are counted.
const maxSkipLogged = 20

// loadState restores records from the state file by identity key. A
// missing file is not an error. A file that cannot be parsed is renamed
// aside and reported; start-up goes on with fresh records. A record that
// cannot be read is logged with its line and skipped; the others are
// restored. Records of upstreams no longer configured are kept as the
// tracker keeps removed ones (health.Tracker.RestoreRemoved), removed at
// this start.
func (s *Server) loadState() error {
	path := s.statePathInUse()
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	// ENOTDIR: a parent is a file, so there is no state file to restore
	// or to keep from being written over. That it cannot be written is
	// stateDirError's to say (it was "not restored: … (it will not be
	// written)", and then every write blamed "a file that could not be
	// read or set aside" that was not there).
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		sf := &s.metrics.persist
		sf.writeMu.Lock()
		sf.unread = true
		sf.writeMu.Unlock()
		return nil
	}
	if err != nil {
		why := fmt.Errorf("it could not be read at start (%w), and rotor does not write over what it could not read", pathCause(err))
		if info, serr := os.Stat(path); serr == nil && info.IsDir() {
			why = errors.New("it is a directory")
		}
		s.blockState(why)
		return fmt.Errorf("state file %s: %w (it will not be written)", path, err)
	}
	doc, err := parseState(data)
	if err != nil {
		aside, rerr := s.setAside(path, "corrupt")
		if rerr != nil {
			s.blockState(fmt.Errorf("it is corrupt and could not be set aside (%w), and rotor does not write over it", pathCause(rerr)))
			return fmt.Errorf("state file %s is corrupt (%v) and could not be set aside: %w (it will not be written)", path, err, rerr)
		}
		return fmt.Errorf("state file %s is corrupt (%v): moved to %s; starting with fresh records", path, err, aside)
	}
	for i, sk := range doc.skipped {
		if i == maxSkipLogged {
			s.log.Warn().Str("path", path).Int("more", len(doc.skipped)-i).Msg("state file: more records skipped")
			break
		}
		s.log.Warn().Str("path", path).Int("line", sk.line).Str("key", sk.key).Bool("removed", sk.removed).
			Err(sk.err).Msg("state file record skipped: it cannot be read; the others are restored")
	}
	byKey := make(map[string]stateRecord, len(doc.Records))
	for _, r := range doc.Records {
		byKey[r.Key] = r
	}
	restored := 0
	configured := make(map[string]bool, len(s.pool.Endpoints()))
	for _, e := range s.pool.Endpoints() {
		configured[e.Key] = true
		r, ok := byKey[e.Key]
		if !ok {
			continue
		}
		snap := r.snapshot()
		if r.configDisabled() {
			// The config has the last word on its own disable (as
			// health.Tracker.Add does on a reload): a record the config
			// disabled and no longer does keeps the state it starts in
			// with its counters and history (bug: it stayed disabled
			// until an operator enabled it). Still disabled in the
			// config, it is disabled already.
			if cur := s.tr.Snapshot(e.Record()); cur.State != health.Disabled {
				snap.State, snap.Reason, snap.Stage, snap.Detail, snap.Until = cur.State, cur.Reason, cur.Stage, cur.Detail, time.Time{}
			}
		}
		if s.tr.Restore(e.Key, snap) {
			restored++
		}
	}
	revived, kept, expired := 0, 0, 0
	// Records of upstreams left out of the config while rotor was
	// stopped ("stale"): kept as a reload that removes an upstream keeps
	// its record, removed now, when this start finds it gone (when it
	// left is not known; the file's time would expire it sooner than a
	// reload would). They were dropped: an operator's disable and the
	// history were lost to an edit made during a restart.
	stale := 0
	now := s.clock.Now()
	for _, r := range doc.Records {
		if configured[r.Key] {
			continue
		}
		stale++
		rm := health.Removed{Snapshot: r.snapshot(), ConfigDisabled: r.configDisabled(), At: now}
		if s.tr.RestoreRemoved(rm) {
			kept++
		} else {
			expired++
		}
	}
	if stale > 0 {
		s.kickState() // write the removal down, with its time, soon
	}
	// Records of removed upstreams: onto an upstream back in the config,
	// else kept for the rest of their 15 minutes.
	for _, r := range doc.Removed {
		if _, live := byKey[r.Key]; live {
			continue // not in files rotor writes; the live record wins
		}
		rm := health.Removed{Snapshot: r.snapshot(), ConfigDisabled: r.ConfigDisabled, At: r.RemovedAt}
		switch ok := s.tr.RestoreRemoved(rm); {
		case !ok:
			expired++
		case configured[r.Key]:
			revived++
		default:
			kept++
		}
	}
	s.log.Info().Str("path", path).Int("restored", restored).Int("stale", stale).Int("skipped", len(doc.skipped)).
		Int("revived", revived).Int("removed", kept).Int("expired", expired).
		Time("written", doc.Written).Msg("state file restored")
	return nil
}

// blockState stops every later write to the state file, for the reason
// why (what each refused write says).
func (s *Server) blockState(why error) {
	sf := &s.metrics.persist
	sf.mu.Lock()
	sf.blockedBy = why
	sf.mu.Unlock()
}
