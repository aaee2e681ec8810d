package gateway

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"os"
	"testing"
)

// partialReader returns its text, then err: a connection whose read
// deadline fired in the middle of a line.
type partialReader struct {
	text string
	err  error
}

func (r *partialReader) Read(p []byte) (int, error) {
	if r.text == "" {
		return 0, r.err
	}
	n := copy(p, r.text)
	r.text = r.text[n:]
	return n, nil
}

// TestCutMemo: under a bufio.Reader, cutMemo keeps the deadline error
// that bufio's ReadLine drops when it hands back a partial status line,
// so a parse error of an answer cut short can be told from a malformed
// one; an answer that ended (EOF) is not cut.
func TestCutMemo(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		cut  bool
	}{
		{"deadline", os.ErrDeadlineExceeded, true},
		{"eof", io.EOF, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := &cutMemo{r: &partialReader{text: "HTTP/1.1", err: tt.err}}
			_, err := http.ReadResponse(bufio.NewReader(m), nil)
			if err == nil {
				t.Fatal("ReadResponse took a partial status line")
			}
			if got := m.cut(); (got != nil) != tt.cut || tt.cut && !errors.Is(got, os.ErrDeadlineExceeded) {
				t.Errorf("cut() = %v, want cut %v (ReadResponse said %v)", got, tt.cut, err)
			}
			m.reset()
			if m.cut() != nil {
				t.Errorf("cut() after reset = %v", m.cut())
			}
		})
	}
}
