package schema

import (
	"errors"
	"strings"
	"testing"
)

func ptr[T any](v T) *T { return &v }

func TestValidateCodes(t *testing.T) {
	small := Limits{MaxTexts: 3, MaxTextBytes: 10, MaxJobBytes: 25, MaxIDBytes: 8}
	tests := []struct {
		name string
		job  *Job
		want Code
	}{
		{"ok", NewJob("a", "hello"), ""},
		{"ok all fields", &Job{V: 1, ID: "a", Texts: []string{"x"}, Outputs: []Output{OutputDense, OutputSparse, OutputColBERT},
			Truncate: ptr(false), Reply: "r", Deadline: "2030-01-02T03:04:05Z", Meta: map[string]any{"k": 1}}, ""},
		{"nil job", nil, CodeBadPayload},
		{"version 0", &Job{V: 0, ID: "a", Texts: []string{"x"}}, CodeBadVersion},
		{"version 2", &Job{V: 2, ID: "a", Texts: []string{"x"}}, CodeBadVersion},
		{"missing id", NewJob("", "x"), CodeMissingID},
		{"id too long", NewJob("123456789", "x"), CodeBadPayload},
		{"id not utf8", NewJob("\xff", "x"), CodeBadPayload},
		{"reply inbox ok", &Job{V: 1, ID: "a", Texts: []string{"x"}, Reply: "_INBOX.abc.def"}, ""},
		{"bad deadline", &Job{V: 1, ID: "a", Texts: []string{"x"}, Deadline: "tomorrow"}, CodeBadPayload},
		{"interactive", &Job{V: 1, ID: "a", Texts: []string{"x"}, Priority: PriorityInteractive}, ""},
		{"bulk", &Job{V: 1, ID: "a", Texts: []string{"x"}, Priority: PriorityBulk}, ""},
		{"unknown priority", &Job{V: 1, ID: "a", Texts: []string{"x"}, Priority: "urgent"}, CodeBadPayload},
		{"no texts", NewJob("a"), CodeEmptyJob},
		{"too many texts", NewJob("a", "1", "2", "3", "4"), CodeTooManyTexts},
		{"text too large", NewJob("a", strings.Repeat("x", 11)), CodeJobTooLarge},
		{"texts together too large", NewJob("a", strings.Repeat("x", 10), strings.Repeat("x", 10), strings.Repeat("x", 6)), CodeJobTooLarge},
		{"unknown output", &Job{V: 1, ID: "a", Texts: []string{"x"}, Outputs: []Output{"dense", "Dense"}}, CodeUnknownOutput},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, items := small.Validate(tt.job)
			if codeOf(got) != tt.want {
				t.Fatalf("Validate() = %v, want code %q", got, tt.want)
			}
			if got != nil && items != nil {
				t.Errorf("item errors %v returned with a job error", items)
			}
			if got != nil && got.Retriable {
				t.Errorf("validation error %v is retriable", got)
			}
		})
	}
}

func TestValidateInvalidUTF8FailsOnlyThatItem(t *testing.T) {
	j := NewJob("a", "fine", "bad \xc3\x28", "also fine", "\xed\xa0\x80")
	jobErr, items := DefaultLimits().Validate(j)
	if jobErr != nil {
		t.Fatalf("job error %v, want none", jobErr)
	}
	want := []Code{"", CodeInvalidUTF8, "", CodeInvalidUTF8}
	if len(items) != len(want) {
		t.Fatalf("got %d item errors, want %d", len(items), len(want))
	}
	for i, w := range want {
		if codeOf(items[i]) != w {
			t.Errorf("item %d: got %v, want %q", i, items[i], w)
		}
	}
	if _, items := DefaultLimits().Validate(NewJob("a", "ok")); items != nil {
		t.Errorf("valid texts: items = %v, want nil", items)
	}
}

func TestCheckPayload(t *testing.T) {
	l := Limits{MaxJobBytes: 100}
	if err := l.CheckPayload(100); err != nil {
		t.Errorf("CheckPayload(100) = %v, want nil", err)
	}
	if err := l.CheckPayload(101); codeOf(err) != CodeJobTooLarge {
		t.Errorf("CheckPayload(101) = %v, want job_too_large", err)
	}
	if err := (Limits{}).CheckPayload(DefaultMaxJobBytes + 1); codeOf(err) != CodeJobTooLarge {
		t.Errorf("zero Limits: CheckPayload over default = %v, want job_too_large", err)
	}
}

func TestLimitsDecodeJob(t *testing.T) {
	l := Limits{MaxJobBytes: 64}
	good := mustEncodeJob(t, NewJob("id-1", "a", "b\xff"), EncodingMsgpack)
	j, items, err := l.DecodeJob(good, EncodingMsgpack)
	if err != nil || j == nil || len(items) != 2 || items[0] != nil || codeOf(items[1]) != CodeInvalidUTF8 {
		t.Fatalf("DecodeJob(good) = %v, %v, %v", j, items, err)
	}
	big := mustEncodeJob(t, NewJob("id-1", strings.Repeat("x", 80)), EncodingMsgpack)
	if _, _, err := l.DecodeJob(big, EncodingMsgpack); codeOf(err) != CodeJobTooLarge {
		t.Errorf("DecodeJob(big) error = %v, want job_too_large", err)
	}
	j, _, err = l.DecodeJob([]byte(`{"id":"keep-me","texts":[1]}`), EncodingJSON)
	if codeOf(err) != CodeBadPayload {
		t.Fatalf("DecodeJob(wrong type) error = %v, want bad_payload", err)
	}
	if j == nil || j.ID != "keep-me" {
		t.Errorf("partial job = %v, want id keep-me for the error result", j)
	}
	_, _, err = l.DecodeJob([]byte(`{"v":3,"id":"x","texts":["a"]}`), EncodingJSON)
	if codeOf(err) != CodeBadVersion {
		t.Errorf("DecodeJob(v 3) error = %v, want bad_version", err)
	}
	if !errors.Is(err, &Error{Code: CodeBadVersion}) {
		t.Errorf("errors.Is does not match the code")
	}
}

func TestWithDefaults(t *testing.T) {
	got := Limits{MaxTexts: 5, MaxIDBytes: -1}.WithDefaults()
	want := Limits{MaxTexts: 5, MaxTextBytes: DefaultMaxTextBytes, MaxJobBytes: DefaultMaxJobBytes, MaxIDBytes: DefaultMaxIDBytes}
	if got != want {
		t.Errorf("WithDefaults() = %+v, want %+v", got, want)
	}
	if DefaultLimits() != (Limits{}).WithDefaults() {
		t.Errorf("DefaultLimits() differs from zero Limits with defaults")
	}
}
