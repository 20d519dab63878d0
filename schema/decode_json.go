package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// decodeJobJSON decodes a JSON job strictly, where encoding/json would be
// lenient in ways different parsers disagree on: field names match exactly
// ("REPLY" is an unknown field, not reply), a key given twice anywhere is an
// error (encoding/json keeps the last), a number no float64 holds (1e999) is
// an error anywhere (echoed in meta, it would make a result Go cannot
// decode), nesting is bounded like msgpack's, and meta keeps its bytes so
// that the result echoes it byte for byte. null means absent, for every
// field.
func decodeJobJSON(data []byte, j *Job) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	if err := expectDelim(d, '{', "body is not a JSON object"); err != nil {
		return err
	}
	var seen keySet
	sawV := false
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		if seen.add(key) {
			return fmt.Errorf("field %s given twice", quoteShort(key))
		}
		var raw json.RawMessage
		if err := d.Decode(&raw); err != nil {
			return fmt.Errorf("field %s: %w", quoteShort(key), err)
		}
		if err := j.decodeJSONField(key, raw, &sawV); err != nil {
			return fmt.Errorf("field %s: %w", quoteShort(key), err)
		}
	}
	if _, err := d.Token(); err != nil { // the closing brace
		return err
	}
	if _, err := d.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON object")
	}
	if !sawV {
		j.V = Version
	}
	return nil
}

// decodeJSONField sets the field key from its raw value. Values of the
// typed fields hold no object keys, so json.Unmarshal's leniency about
// names does not reach them; meta and unknown fields are walked by
// [checkJSON].
func (j *Job) decodeJSONField(key string, raw json.RawMessage, sawV *bool) error {
	if string(raw) == "null" {
		return nil // absent
	}
	switch key {
	case "v":
		*sawV = true
		var v int64
		if err := json.Unmarshal(raw, &v); err != nil {
			return err
		}
		j.V = clampInt(v)
	case "id":
		return json.Unmarshal(raw, &j.ID)
	case "texts":
		return json.Unmarshal(raw, &j.Texts)
	case "outputs":
		return json.Unmarshal(raw, &j.Outputs)
	case "truncate":
		var b bool
		if err := json.Unmarshal(raw, &b); err != nil {
			return err
		}
		j.Truncate = &b
	case "reply":
		return json.Unmarshal(raw, &j.Reply)
	case "deadline":
		return json.Unmarshal(raw, &j.Deadline)
	case "priority":
		return json.Unmarshal(raw, &j.Priority)
	case "meta":
		if raw[0] != '{' {
			return errors.New("meta must be an object")
		}
		if err := checkJSON(raw); err != nil {
			return err
		}
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber() // numbers echo digit for digit
		if err := d.Decode(&j.Meta); err != nil {
			return err
		}
		j.rawMeta = rawMeta{data: bytes.Clone(raw), enc: EncodingJSON}
	default:
		return checkJSON(raw)
	}
	return nil
}

// checkJSON walks one JSON value: no key twice in an object, no number out
// of float64's range, at most maxDepth levels.
func checkJSON(raw []byte) error {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	return walkJSON(d, 0)
}

func walkJSON(d *json.Decoder, depth int) error {
	if depth > maxDepth {
		return errTooDeep
	}
	tok, err := d.Token()
	if err != nil {
		return err
	}
	switch t := tok.(type) {
	case json.Number:
		if _, err := strconv.ParseFloat(string(t), 64); err != nil {
			return fmt.Errorf("number %s is out of range", quoteShort(string(t)))
		}
	case json.Delim:
		var keys keySet
		for d.More() {
			if t == '{' {
				k, err := d.Token()
				if err != nil {
					return err
				}
				if key, _ := k.(string); keys.add(key) {
					return fmt.Errorf("key %s given twice", quoteShort(key))
				}
			}
			if err := walkJSON(d, depth+1); err != nil {
				return err
			}
		}
		_, err := d.Token() // the closing delimiter
		return err
	}
	return nil
}

func expectDelim(d *json.Decoder, want json.Delim, msg string) error {
	tok, err := d.Token()
	if err != nil || tok != want {
		return errors.New(msg)
	}
	return nil
}

// keySet records the keys of one object or map to find one given twice:
// a few keys are compared in place, more go to a map.
type keySet struct {
	few  [8]string
	n    int
	many map[string]struct{}
}

// add records key and reports whether it was already there.
func (s *keySet) add(key string) bool {
	if s.many != nil {
		if _, dup := s.many[key]; dup {
			return true
		}
		s.many[key] = struct{}{}
		return false
	}
	for _, k := range s.few[:s.n] {
		if k == key {
			return true
		}
	}
	if s.n < len(s.few) {
		s.few[s.n] = key
		s.n++
		return false
	}
	s.many = make(map[string]struct{}, 2*len(s.few))
	for _, k := range s.few {
		s.many[k] = struct{}{}
	}
	s.many[key] = struct{}{}
	return false
}
