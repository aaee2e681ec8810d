package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// report is everything one run produced; it is printed as a table and
// written as JSON with -json.
type report struct {
	Timestamp string            `json:"timestamp"`
	Commit    string            `json:"commit"`       // git rev-parse HEAD, empty outside a repo
	Dirty     bool              `json:"commit_dirty"` // tracked files differ from the commit
	GoVersion string            `json:"go_version"`
	CPUs      int               `json:"cpus"`
	LoadStart string            `json:"loadavg_start"` // /proc/loadavg 1/5/15 min: noise context
	LoadEnd   string            `json:"loadavg_end"`
	Mode      string            `json:"mode"` // spawn | external | relay-as-gateway | baseline-only
	Args      []string          `json:"args"`
	Flags     map[string]string `json:"flags"`
	Relay     string            `json:"relay"`
	Gateway   gatewayInfo       `json:"gateway"`
	Table     []row             `json:"table"`
	Idle      *idleResult       `json:"idle,omitempty"`
	Bulk      []bulkResult      `json:"bulk,omitempty"`
	Setup     []setupResult     `json:"setup,omitempty"`
	HTTP      []httpResult      `json:"http,omitempty"`
	Notes     []string          `json:"notes"`
}

// gatewayInfo describes the gateway under test.
type gatewayInfo struct {
	Binary        string `json:"binary,omitempty"`
	PID           int    `json:"pid,omitempty"`
	SOCKS5        string `json:"socks5,omitempty"`
	HTTP          string `json:"http,omitempty"`
	Admin         string `json:"admin,omitempty"`
	Nofile        *int64 `json:"nofile_limit,omitempty"`
	StartEligible *bool  `json:"start_eligible,omitempty"`
	Config        string `json:"config,omitempty"`
	LogPath       string `json:"log_path,omitempty"`
}

// row is one line of the table: the gateway's figure, the baseline's, their
// ratio and the issue-8 target. Nil means not measured.
type row struct {
	Figure   string   `json:"figure"`
	Unit     string   `json:"unit"`
	Gateway  *float64 `json:"gateway"`
	Baseline *float64 `json:"baseline"`
	Ratio    *float64 `json:"ratio"`
	Target   string   `json:"target"`
	Pass     *bool    `json:"pass"`
}

func newReport(o *options) *report {
	r := &report{
		Timestamp: time.Now().UTC().Format(time.RFC3339),
		GoVersion: runtime.Version(),
		CPUs:      runtime.NumCPU(),
		LoadStart: loadAvg(),
		Args:      o.args,
		Flags:     o.values,
		Notes:     []string{},
	}
	if o.Commit != "" {
		r.Commit, r.Dirty = o.Commit, o.CommitDirty
	} else if out, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
		r.Commit = strings.TrimSpace(string(out))
		st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output()
		r.Dirty = err == nil && len(strings.TrimSpace(string(st))) > 0
	}
	return r
}

func (r *report) note(format string, a ...any) { r.Notes = append(r.Notes, fmt.Sprintf(format, a...)) }

// medianOf returns the result with the median key among those matching.
func medianOf[T any](xs []T, match func(T) bool, key func(T) float64) (T, bool) {
	var m []T
	for _, x := range xs {
		if match(x) {
			m = append(m, x)
		}
	}
	if len(m) == 0 {
		var zero T
		return zero, false
	}
	slices.SortFunc(m, func(a, b T) int {
		switch ka, kb := key(a), key(b); {
		case ka < kb:
			return -1
		case ka > kb:
			return 1
		}
		return 0
	})
	return m[(len(m)-1)/2], true
}

// pairedRatio returns the median over rounds of gateway/baseline, pairing
// the runs of the same round (they ran back to back, so machine noise hits
// both alike). It returns nil unless at least two rounds pair up.
func pairedRatio[T any](xs []T, isGW, isBase func(T) bool, round func(T) int, key func(T) float64) *float64 {
	base := map[int]float64{}
	for _, x := range xs {
		if isBase(x) {
			base[round(x)] = key(x)
		}
	}
	var rs []float64
	for _, x := range xs {
		if b, ok := base[round(x)]; ok && isGW(x) && b > 0 {
			rs = append(rs, key(x)/b)
		}
	}
	if len(rs) < 2 {
		return nil
	}
	slices.Sort(rs)
	return fptr(rs[(len(rs)-1)/2])
}

// withRatio replaces rw's ratio (and verdict) with r when r is not nil.
func withRatio(rw row, r *float64, atLeast bool, bound float64) row {
	if r == nil {
		return rw
	}
	rw.Ratio = r
	if bound > 0 {
		if atLeast {
			rw.Pass = ptr(*r >= bound)
		} else {
			rw.Pass = ptr(*r <= bound)
		}
	}
	return rw
}

// ratioRow builds a row whose target is a bound on gateway/baseline.
func ratioRow(fig, unit string, gw, base *float64, atLeast bool, bound float64) row {
	rw := row{Figure: fig, Unit: unit, Gateway: gw, Baseline: base}
	if gw != nil && base != nil && *base > 0 {
		rw.Ratio = fptr(*gw / *base)
	}
	if bound > 0 {
		if atLeast {
			rw.Target = fmt.Sprintf(">= %.2fx", bound)
		} else {
			rw.Target = fmt.Sprintf("<= %.2fx", bound)
		}
		if rw.Ratio != nil {
			if atLeast {
				rw.Pass = ptr(*rw.Ratio >= bound)
			} else {
				rw.Pass = ptr(*rw.Ratio <= bound)
			}
		}
	}
	return rw
}

// limitRow builds a row whose target is an absolute bound on the gateway.
func limitRow(fig, unit string, gw, base *float64, limit float64) row {
	rw := row{Figure: fig, Unit: unit, Gateway: gw, Baseline: base, Target: fmt.Sprintf("<= %g", limit)}
	if gw != nil && base != nil && *base > 0 {
		rw.Ratio = fptr(*gw / *base)
	}
	if gw != nil {
		rw.Pass = ptr(*gw <= limit)
	}
	return rw
}

func intF(p *int) *float64 {
	if p == nil {
		return nil
	}
	return fptr(float64(*p))
}

// WriteText prints the header, the table and the notes.
func (r *report) WriteText(w io.Writer) {
	commit := orDash(r.Commit)
	if r.Dirty {
		commit += "+dirty"
	}
	fmt.Fprintf(w, "rotor-bench %s  mode=%s  commit=%s  %s  cpus=%d\n", r.Timestamp, r.Mode, commit, r.GoVersion, r.CPUs)
	fmt.Fprintf(w, "relay=%s  gateway socks5=%s http=%s pid=%d  duration=%s rounds=%s  loadavg %s -> %s\n\n",
		r.Relay, orDash(r.Gateway.SOCKS5), orDash(r.Gateway.HTTP), r.Gateway.PID, r.Flags["duration"], r.Flags["rounds"],
		orDash(r.LoadStart), orDash(r.LoadEnd))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "figure\tunit\tgateway\tbaseline\tratio\ttarget\tpass\t")
	for _, rw := range r.Table {
		pass := "-"
		if rw.Pass != nil {
			pass = map[bool]string{true: "yes", false: "NO"}[*rw.Pass]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", rw.Figure, rw.Unit, num(rw.Gateway), num(rw.Baseline),
			ratio(rw.Ratio), orDash(rw.Target), pass)
	}
	tw.Flush()
	if len(r.Notes) > 0 {
		fmt.Fprintln(w, "\nnotes:")
		for _, n := range r.Notes {
			fmt.Fprintln(w, "  -", n)
		}
	}
}

// WriteJSONFile writes the report as indented JSON.
func (r *report) WriteJSONFile(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func num(p *float64) string {
	switch {
	case p == nil:
		return "n/a"
	case *p == float64(int64(*p)):
		return fmt.Sprintf("%d", int64(*p))
	case *p >= 100 || *p <= -100:
		return fmt.Sprintf("%.0f", *p)
	case *p >= 10 || *p <= -10:
		return fmt.Sprintf("%.1f", *p)
	default:
		s := fmt.Sprintf("%.3f", *p)
		if s == "-0.000" { // a tiny negative delta (one goroutine fewer over 5,000 tunnels)
			s = "0.000"
		}
		return s
	}
}

func ratio(p *float64) string {
	if p == nil {
		return "-"
	}
	// Three decimals: with two, a ratio of 0.566 against a target of
	// 0.57 would print as 0.57x next to "NO".
	return fmt.Sprintf("%.3fx", *p)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
