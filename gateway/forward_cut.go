package gateway

import (
	"errors"
	"io"
	"net"
)

// cutMemo sits between a forwarded connection's bufio.Reader and the
// connection, passes reads through and remembers the last read error.
// At a read deadline bufio's ReadLine hands back the part of a line that
// came with no error, so http.ReadResponse parses a status line cut short
// ("HTTP/1.1") and calls the answer malformed: an answer trickling in past
// slow_body.first_byte read as the target's nonsense (target_unreachable)
// instead of the slow answer it is (slow_body, as a silent one). With
// cutMemo under the reader, exchange asks cut after a parse error.
type cutMemo struct {
	r   io.Reader
	err error
}

func (m *cutMemo) Read(p []byte) (int, error) {
	n, err := m.r.Read(p)
	if err != nil {
		m.err = err
	}
	return n, err
}

// reset forgets the last error, before an exchange on a kept-alive
// connection.
func (m *cutMemo) reset() { m.err = nil }

// cut returns the error of the last read when it ended at a deadline,
// else nil.
func (m *cutMemo) cut() error {
	var ne net.Error
	if m.err != nil && errors.As(m.err, &ne) && ne.Timeout() {
		return m.err
	}
	return nil
}
