package main

import (
	"bytes"
	"io"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/internal/logbuf"
)

// logOutput returns what the logger writes to for format (json or
// console) and the logbuf.Writer under it, which run closes at exit.
// Both formats go through logbuf: a stderr nobody reads (a stalled
// docker logs driver, journald backpressure, a terminal paused with
// ^S) must never stall a connection's goroutine, which logs its summary
// line before it answers or closes its client.
func logOutput(format string, stderr io.Writer) (zerolog.LevelWriter, *logbuf.Writer) {
	if format != "console" {
		// Info lines (one per tunnel and per request) are written in
		// batches at most 100 ms old; warnings and errors at once.
		lw := logbuf.New(stderr, logbuf.Config{})
		return lw, lw
	}
	// Colours only on a terminal: a log file, journald or docker logs
	// would get the escape codes.
	cw := zerolog.ConsoleWriter{Out: io.Discard, TimeFormat: time.RFC3339, NoColor: !isTerminal(stderr)}
	notice := func(n uint64) []byte {
		var b bytes.Buffer
		c := cw
		c.Out = &b
		_, _ = c.Write(logbuf.NoticeJSON(n))
		return b.Bytes()
	}
	lw := logbuf.New(stderr, logbuf.Config{Notice: notice})
	return consoleLevels{cw: cw, lw: lw}, lw
}

// consoleLevels formats each line for people and hands it to lw with its
// level: zerolog.ConsoleWriter has no WriteLevel, and without the level
// lw would hold warnings like info lines.
type consoleLevels struct {
	cw zerolog.ConsoleWriter
	lw *logbuf.Writer
}

func (c consoleLevels) Write(p []byte) (int, error) {
	return c.WriteLevel(zerolog.InfoLevel, p)
}

func (c consoleLevels) WriteLevel(level zerolog.Level, p []byte) (int, error) {
	cw := c.cw // a copy per line: concurrent lines have their own Out
	cw.Out = levelOut{c.lw, level}
	return cw.Write(p)
}

// levelOut writes one formatted line to lw at level.
type levelOut struct {
	lw    *logbuf.Writer
	level zerolog.Level
}

func (o levelOut) Write(p []byte) (int, error) { return o.lw.WriteLevel(o.level, p) }
