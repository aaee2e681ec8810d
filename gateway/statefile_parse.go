package gateway

// Reading a state file (statefile.go): the document as a whole must be a
// state file of this version, while each record is read on its own, so
// that one record no rotor could have written costs only that record.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// parseState decodes and checks a state file. A file that is not a state
// file as a whole (not JSON, not an object, a version rotor does not
// know) is an error. A record that cannot be read on its own (a state no
// rotor writes, a field of the wrong type, no key) is left out and listed
// in doc.skipped with its line, so that one bad line does not cost every
// other record, operator disables included.
func parseState(data []byte) (*stateDoc, error) {
	var doc stateDoc
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil {
		return nil, err
	} else if t != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, _ := t.(string)
		switch strings.ToLower(name) { // as encoding/json matches fields
		case "version":
			err = dec.Decode(&doc.Version)
		case "written":
			err = dec.Decode(&doc.Written)
		case "records":
			err = decodeStateRecords(dec, data, func(raw []byte, line int) {
				var r stateRecord
				switch err := json.Unmarshal(raw, &r); {
				case err != nil:
					doc.skip(raw, line, false, err)
				case r.Key == "":
					doc.skip(raw, line, false, errors.New("no key"))
				default:
					doc.Records = append(doc.Records, r)
				}
			})
		case "removed":
			err = decodeStateRecords(dec, data, func(raw []byte, line int) {
				var r stateRemoved
				switch err := json.Unmarshal(raw, &r); {
				case err != nil:
					doc.skip(raw, line, true, err)
				case r.Key == "" || r.RemovedAt.IsZero():
					doc.skip(raw, line, true, errors.New("no key or no removed_at"))
				default:
					doc.Removed = append(doc.Removed, r)
				}
			})
		default:
			var ignored json.RawMessage // a field of a later rotor
			err = dec.Decode(&ignored)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the document")
	}
	if doc.Version != stateVersion {
		return nil, fmt.Errorf("unsupported version %d (want %d)", doc.Version, stateVersion)
	}
	return &doc, nil
}

// decodeStateRecords reads the array dec is at (null: none) and hands each
// element to use, with the line of data it starts on. An element that is
// not JSON at all ends the read: past it nothing can be trusted.
func decodeStateRecords(dec *json.Decoder, data []byte, use func(raw []byte, line int)) error {
	t, err := dec.Token()
	if err != nil || t == nil {
		return err
	}
	if t != json.Delim('[') {
		return errors.New("not an array")
	}
	for dec.More() {
		// The offset is where the last value ended: the element starts
		// after the separator and white space that follow.
		at := int(dec.InputOffset())
		for at < len(data) && strings.IndexByte(", \t\r\n", data[at]) >= 0 {
			at++
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return err
		}
		use(raw, 1+bytes.Count(data[:at], []byte("\n")))
	}
	_, err = dec.Token() // the closing bracket
	return err
}

// stateSkip is a record of the state file that could not be read.
type stateSkip struct {
	line    int
	key     string // as far as it could be read; "" when not
	removed bool   // under "removed"
	err     error
}

// skip notes a record left out.
func (d *stateDoc) skip(raw []byte, line int, removed bool, err error) {
	var k struct {
		Key string `json:"key"`
	}
	_ = json.Unmarshal(raw, &k)
	d.skipped = append(d.skipped, stateSkip{line: line, key: k.Key, removed: removed, err: err})
}
