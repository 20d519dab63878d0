package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/vmihailenco/msgpack/v5"
)

// DecodeJob decodes a job body. Any failure is an *Error with
// [CodeBadPayload]: malformed bytes, a body that is not a map/object, a
// field of the wrong type, a key given twice (anywhere, meta included),
// trailing data; in JSON also a number no float64 holds. Field names match
// exactly. Unknown fields are ignored, so producers may add fields ahead of
// consumers. Meta keeps its bytes as they arrived: [Result.EchoMeta] echoes
// them unchanged.
//
// On failure the returned Job may still be non-nil, holding the fields
// decoded before the failure (typically ID and Reply), so that the caller
// can address an error result. DecodeJob does not validate: call
// [Limits.Validate] (or [Limits.DecodeJob], which does both).
func DecodeJob(data []byte, enc Encoding) (*Job, error) {
	j := new(Job)
	var err error
	if enc == EncodingJSON {
		err = decodeJobJSON(data, j)
	} else {
		err = decodeMsgpack(data, j)
	}
	if err != nil {
		return j, Errorf(CodeBadPayload, "decode %s job: %v", enc, err)
	}
	return j, nil
}

// DecodeMsgpack decodes a job map by hand so that no length header can
// force an allocation larger than the payload and no field accepts a value
// of another type. An absent "v" decodes as [Version].
func (j *Job) DecodeMsgpack(dec *msgpack.Decoder) error {
	r := reader{dec}
	n, err := r.mapLen()
	if err != nil {
		return err
	}
	if n < 0 {
		return errors.New("job is nil")
	}
	sawV := false
	var seen keySet
	for range n {
		key, err := r.str()
		if err != nil {
			return fmt.Errorf("field name: %w", err)
		}
		if seen.add(key) {
			return fmt.Errorf("field %s given twice", quoteShort(key))
		}
		if err := j.decodeField(r, key, &sawV); err != nil {
			return fmt.Errorf("field %q: %w", key, err)
		}
	}
	if !sawV {
		j.V = Version
	}
	return nil
}

func (j *Job) decodeField(r reader, key string, sawV *bool) error {
	if isNil, err := r.isNil(); err != nil || isNil {
		return err // nil means absent for every field
	}
	var err error
	switch key {
	case "v":
		var v int64
		v, err = r.integer()
		j.V = clampInt(v)
		*sawV = true
	case "id":
		j.ID, err = r.str()
	case "texts":
		j.Texts, err = r.strings()
	case "outputs":
		var ss []string
		ss, err = r.strings()
		j.Outputs = make([]Output, len(ss))
		for i, s := range ss {
			j.Outputs[i] = Output(s)
		}
	case "truncate":
		var b bool
		b, err = r.boolean()
		j.Truncate = &b
	case "reply":
		j.Reply, err = r.str()
	case "deadline":
		j.Deadline, err = r.str()
	case "priority":
		var p string
		p, err = r.str()
		j.Priority = Priority(p)
	case "meta":
		start, ok := r.offset()
		j.Meta, err = r.meta()
		if err == nil && ok {
			j.rawMeta = rawMeta{data: r.rawFrom(start), enc: EncodingMsgpack}
		}
	default:
		err = r.skip()
	}
	return err
}

// clampInt keeps an out-of-range version from wrapping around to 1 on
// 32-bit platforms.
func clampInt(v int64) int {
	if int64(int(v)) != v {
		return -1
	}
	return int(v)
}

// decodeMsgpack decodes data into v, which must use a reader-based
// DecodeMsgpack, and refuses trailing bytes.
func decodeMsgpack(data []byte, v msgpack.CustomDecoder) error {
	br := bytes.NewReader(data)
	dec := msgpack.GetDecoder()
	defer msgpack.PutDecoder(dec)
	dec.Reset(br)
	if err := v.DecodeMsgpack(dec); err != nil {
		return err
	}
	if br.Len() != 0 {
		return fmt.Errorf("%d trailing bytes", br.Len())
	}
	return nil
}

// decodeJSON decodes one JSON object into v. Numbers in opaque maps stay
// json.Number so that meta echoes back digit for digit.
func decodeJSON(data []byte, v any) error {
	data = bytes.TrimLeft(data, " \t\r\n")
	if len(data) == 0 || data[0] != '{' {
		return errors.New("body is not a JSON object")
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		return err
	}
	if _, err := d.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}
