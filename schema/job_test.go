package schema

import (
	"errors"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// customFunc adapts a function to msgpack.CustomDecoder for tests.
type customFunc func(r reader) error

func (f customFunc) DecodeMsgpack(dec *msgpack.Decoder) error { return f(reader{dec}) }

func TestNewJobDefaults(t *testing.T) {
	j := NewJob("id", "a", "b")
	if j.V != Version || j.ID != "id" || len(j.Texts) != 2 {
		t.Fatalf("NewJob = %+v", j)
	}
	if !j.Truncates() {
		t.Error("default job does not truncate")
	}
	if !j.Wants(OutputDense) || j.Wants(OutputSparse) || j.Wants(OutputColBERT) {
		t.Error("default outputs are not dense only")
	}
	j.Truncate = ptr(false)
	j.Outputs = []Output{OutputSparse}
	if j.Truncates() || j.Wants(OutputDense) || !j.Wants(OutputSparse) {
		t.Errorf("explicit settings ignored: %+v", j)
	}
}

func TestParseOutputs(t *testing.T) {
	got, err := ParseOutputs(" dense, Sparse ,colbert")
	if err != nil || len(got) != 3 || got[0] != OutputDense || got[1] != OutputSparse || got[2] != OutputColBERT {
		t.Errorf("ParseOutputs = %v, %v", got, err)
	}
	if got, err := ParseOutputs(""); got != nil || err != nil {
		t.Errorf("ParseOutputs(\"\") = %v, %v; want nil, nil", got, err)
	}
	_, err = ParseOutputs("dense,vectors")
	if !errors.Is(err, &Error{Code: CodeUnknownOutput}) {
		t.Errorf("ParseOutputs(unknown) error = %v, want unknown_output", err)
	}
}

func TestDeadline(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		deadline string
		expired  bool
		bad      bool
	}{
		{"", false, false},
		{"2029-12-31T23:59:59Z", true, false},
		{"2030-01-01T00:00:00Z", true, false},
		{"2030-01-01T01:00:00.5+02:00", true, false},
		{"2030-01-01T00:00:01Z", false, false},
		{"2030-01-01", false, true},
		{"soon", false, true},
	}
	for _, tt := range tests {
		j := &Job{Deadline: tt.deadline}
		if got := j.Expired(now); got != tt.expired {
			t.Errorf("Expired(%q) = %v, want %v", tt.deadline, got, tt.expired)
		}
		_, _, err := j.DeadlineTime()
		if (err != nil) != tt.bad {
			t.Errorf("DeadlineTime(%q) error = %v, want error %v", tt.deadline, err, tt.bad)
		}
	}
}

func TestResultErr(t *testing.T) {
	ok := &Result{V: 1, ID: "a"}
	if ok.Err() != nil {
		t.Errorf("Err() of a good result = %v", ok.Err())
	}
	r := ErrorResult("a", Errorf(CodeOverloaded, "busy"))
	err := r.Err()
	if err == nil || !errors.Is(err, &Error{Code: CodeOverloaded}) {
		t.Fatalf("Err() = %v, want overloaded", err)
	}
	var se *Error
	if !errors.As(err, &se) || !se.Retriable || r.ID != "a" || r.V != Version {
		t.Errorf("ErrorResult = %+v", r)
	}
}

// TestPriorityDecodes: the priority field arrives in both encodings.
func TestPriorityDecodes(t *testing.T) {
	for _, enc := range []Encoding{EncodingMsgpack, EncodingJSON} {
		data, err := EncodeJob(&Job{V: 1, ID: "a", Texts: []string{"x"}, Priority: PriorityInteractive}, enc)
		if err != nil {
			t.Fatal(err)
		}
		j, _, jobErr := Limits{}.WithDefaults().DecodeJob(data, enc)
		if jobErr != nil || !j.Interactive() {
			t.Errorf("%v: decoded %+v, %v; want an interactive job", enc, j, jobErr)
		}
	}
}
