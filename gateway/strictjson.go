package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// Request bodies are decoded by the wire contract's JSON rules, where
// encoding/json is lenient in ways parsers disagree on: field names match
// exactly (a name that differs from a field only in case is refused, not
// taken for it), a key given twice anywhere is refused (encoding/json keeps
// the last), numbers must fit a float64, nesting is bounded, and null means
// absent. Unknown fields are ignored, as the OpenAI and TEI APIs add
// fields ahead of servers.

// maxJSONDepth bounds the nesting of a request body.
const maxJSONDepth = 32

// fields maps the exact field names of one object to where they decode.
type fields map[string]any

// decodeObject decodes body, a JSON object, into fs.
func decodeObject(body []byte, fs fields) *apiError {
	if err := checkJSON(body); err != nil {
		return newError(http.StatusBadRequest, codeInvalidJSON, "the body is not valid JSON: %v", err)
	}
	if err := decodeFields(body, fs); err != nil {
		return newError(http.StatusBadRequest, codeInvalidJSON, "%v", err)
	}
	return nil
}

// decodeFields decodes one object (already checked by checkJSON) into fs.
func decodeFields(raw []byte, fs fields) error {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		return errors.New("the body must be a JSON object")
	}
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		var val json.RawMessage
		if err := d.Decode(&val); err != nil {
			return fmt.Errorf("field %s: %w", short(key), err)
		}
		dst, ok := fs[key]
		if !ok {
			for name := range fs {
				if strings.EqualFold(name, key) {
					return fmt.Errorf("unknown field %s: field names are case-sensitive (did you mean %q?)", short(key), name)
				}
			}
			continue
		}
		if string(val) == "null" {
			continue
		}
		if err := json.Unmarshal(val, dst); err != nil {
			return fmt.Errorf("field %s: %s", key, jsonTypeError(err))
		}
	}
	return nil
}

// jsonTypeError says what encoding/json's error says, without echoing
// the value.
func jsonTypeError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return "a JSON " + te.Value + " where " + te.Type.String() + " was expected"
	}
	return err.Error()
}

// checkJSON checks one JSON value: no key twice in an object, no number
// out of float64's range, at most maxJSONDepth levels, nothing after it.
func checkJSON(raw []byte) error {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := walkJSON(d, 0); err != nil {
		return err
	}
	if _, err := d.Token(); err != io.EOF {
		return errors.New("more than one JSON value")
	}
	return nil
}

func walkJSON(d *json.Decoder, depth int) error {
	if depth > maxJSONDepth {
		return fmt.Errorf("nested deeper than %d levels", maxJSONDepth)
	}
	tok, err := d.Token()
	if err != nil {
		return err
	}
	switch t := tok.(type) {
	case json.Number:
		if _, err := strconv.ParseFloat(string(t), 64); err != nil {
			return fmt.Errorf("number %s is out of range", short(string(t)))
		}
	case json.Delim:
		var keys map[string]struct{}
		for d.More() {
			if t == '{' {
				k, err := d.Token()
				if err != nil {
					return err
				}
				key, _ := k.(string)
				if keys == nil {
					keys = make(map[string]struct{})
				}
				if _, dup := keys[key]; dup {
					return fmt.Errorf("key %s given twice", short(key))
				}
				keys[key] = struct{}{}
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
